"""The simulator (:mod:`schedsim.sim.engine`: ``simulate``), its Timeline (:mod:`schedsim.sim.timeline`) and the
metrics computed from a timeline (:mod:`schedsim.sim.metrics`). Import them from their modules: this package
holds no names of its own, so that the compiled helpers (``schedsim.sim._cwaves``) import without the engine."""
