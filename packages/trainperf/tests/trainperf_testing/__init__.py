"""The toolkit's test helpers: hand-made run folders, synthetic traces, fakes and paths, imported
by trainperf's own tests (packages/trainperf/tests) and by the app's tests (tests/).

Not shipped in the distribution: pytest puts ``packages/trainperf/tests`` on ``sys.path`` (the
``pythonpath`` option of both pyproject files), so ``import trainperf_testing`` works from either
test tree; test modules never import each other.
"""
