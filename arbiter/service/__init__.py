"""Arbiter as a service: workers that take tune jobs from a shared database (`workers`), and
the HTTP side for runtimes and compilers (`app`, answering from the records with `answers`,
counted by `metrics`). Modules are imported as needed: a worker never loads the web stack."""
