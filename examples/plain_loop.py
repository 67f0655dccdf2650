"""A plain PyTorch loop with trainperf's Monitor (no Lightning): `python plain_loop.py RUN`."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf import perf_phase
from trainperf.loop import Monitor

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(1024, 32), torch.randint(0, 4, (1024,)))
train_loader = DataLoader(data, batch_size=32, shuffle=True)
val_loader = DataLoader(data, batch_size=64)

run_dir = sys.argv[1] if len(sys.argv) > 1 else "runs/plain_loop"
with Monitor(run_dir, model=model, optimizer=optimizer) as mon:  # phases, run folder, live line
    for epoch in range(2):
        model.train()
        for x, y in mon.train(train_loader):  # data_wait, forward, backward, optimizer
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in mon.validate(val_loader):
                logits = model(x)
                with perf_phase("metric"):  # a custom phase of your own
                    correct += int((logits.argmax(1) == y).sum())
        print(f"epoch {epoch}: accuracy {correct / len(data):.2f}")
# then: trainperf report RUN_DIR; trainperf try RUN_DIR --candidate knob:dataloader.num_workers=2
