"""First-party lanes, one folder each; registered through the `arbiter.lanes` entry points."""
