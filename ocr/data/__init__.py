"""Receipt data: annotations, synthetic generator, transforms, dataset, DB targets, collate."""
