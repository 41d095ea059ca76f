"""procqueue against its peers, side by side in one run (``scripts/bench.py`` runs it).

    python scripts/bench.py            # full run: 3 interleaved repetitions (~25 min)
    python scripts/bench.py --quick    # 1 repetition, smaller counts (< 5 min)

    # a subset: two systems, one shared workload, two procqueue-only parts
    python scripts/bench.py --quick --systems procqueue-sqlite,huey-redis \
        --workloads throughput_noop --extras storm,pending --json /tmp/b.json \
        --md /tmp/b.md --img-dir /tmp/b-img

Systems: procqueue on PostgreSQL and on SQLite (a ``procqueue supervise``
process with 2 children), pgqueuer, procrastinate, Celery, RQ, Huey on Redis
and Huey on PostgreSQL (Huey 3's ``PostgresHuey``), each peer in the
configuration ``--sweep`` found fastest for the no-op drain (read from
docs/benchmarks-sweep.json), with its 2-slot configuration as an extra
``-2slot`` row (no-op drain and latency only) where that is another. Shared workloads,
each run for every system in every repetition: ``throughput_noop`` (gate-held
no-op drain; procqueue's supervisor CPU per job), ``latency`` (enqueue → start
into an idle system), ``cpu_heavy`` (40 x 50 ms on 2 slots, against nominal
time and the jobs' own CPU time) and ``crashy`` (2% segfaults).

procqueue-only parts (``--extras``), once each after the repetitions:
``cost`` (per job: statements, commits, round trips, WAL, CPU by thread, of the
children and of the PostgreSQL backends; drained and at idle), ``scaling`` (1-8
children), ``backlog`` (100,000 pending at start),
``pending`` (10, 100, 1,000 jobs pending per child: supervisor CPU per job and
RSS), ``storm`` (a job calling ``cx.progress()`` in a tight loop: the
supervisor's CPU as % of a core and other jobs' latency meanwhile),
``long_jobs`` (2,000 jobs of 1 s on 8 children: overhead per job as a fraction
of its time; 80 jobs in --quick), ``fresh_child`` (no-op drain with
``--max-jobs-per-child 1``, SQLite) and ``profile`` (py-spy on the supervisor).

Durations on the 2-core reference machine: the repetitions ~13 min, the
1-second jobs ~9 min (2 x 250 s, the bulk of the extras), the other extras
~3 min: ~25 min in all; ``--quick`` ~4-5 min.

Creates a virtual environment of its own (``--venv``, default
``/tmp/procqueue-bench-venv``), never touching the project's, and installs
procqueue (editable, from this checkout), procrastinate, pgqueuer, Celery,
RQ, Huey (with peewee and psycopg2 for its SQL storage), matplotlib and
py-spy into it; then re-runs itself with that interpreter, so every system
runs in one interpreter environment. Starts PostgreSQL and Redis if they are
down (and says so).

Every system runs the job bodies of ``scripts/bench_jobs.py``; each job
appends a 48-byte record (kind, seq, pid, start, end, cpu) to one file with one
O_APPEND write, and all figures come from those records. Writes
docs/benchmarks.json, docs/benchmarks.md and docs/img/bench-*.png.
"""
