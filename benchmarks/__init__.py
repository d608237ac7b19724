"""lazax benchmarks and the models they (and the tests and the demo) share."""
