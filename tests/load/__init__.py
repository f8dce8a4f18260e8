"""The bounded load test (issue 6 item 6): many concurrent conversations against the API in celery mode with
real workers and a fake model of realistic latency; throughput, latency, errors, lost requests, and the
invariant checker over every thread afterwards. `python -m tests.load.run --threads 50 --duration 300`.
"""
