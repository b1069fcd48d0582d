"""tinykube's scheduler (`python -m scheduler`, port 10259), modelled on kube-scheduler.

Layout, pure core first:
- podinfo.py   a pod's requests/ports/images parsed once (kube-scheduler's request rules)
- cache.py     columnar node table (numpy) + pods on nodes, assumed pods with TTL
- queue.py     activeQ / backoffQ / unschedulable set, moved by cluster events
- framework.py Status, FilterResult, one protocol per extension point, registry
- plugins/     the default plugins, one module per plugin named after it (plugins/nodeaffinity.py
               is NodeAffinity, plugins/defaultpreemption.py the PostFilter DefaultPreemption),
               vectorised over node slots; plugins/__init__.py is the registry
- config.py    the YAML profile (plugins, weights, args) with field-named validation errors
- core.py      Profile + Algorithm: filter, percentageOfNodesToScore, score, select, records
- cycle.py     Scheduler: informer handlers, serial cycle, concurrent binding cycles
- app.py, service.py, metrics.py, settings.py, __main__.py: the process (leader election,
  informers, Bind RPCs, status/events, Explain/Simulate gRPC, Prometheus metrics)
"""
