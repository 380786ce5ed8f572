"""The GPU compute model: what one GPU does with the ops a rank issues (the counterpart of :mod:`schedsim.network`).

One module per part (Calculon's one class per part; ASTRA-sim's compute API is the interface's anchor):

* :mod:`schedsim.gpu.cost`: the solo (uncontended) duration of each op (:class:`~schedsim.gpu.cost.CostModel`);
* :mod:`schedsim.gpu.rules`: the rules of the ``waves`` model (SMs, waves, queues, host issue), each described
  with its source;
* :mod:`schedsim.gpu.host`: the host thread (issue costs, first calls, graph launches);
* :mod:`schedsim.gpu.kernels`: kernel sizing (CTAs, SMs held, memory-bound boost);
* :mod:`schedsim.gpu.rates`: the rate functions and the tables the event loop reads;
* :mod:`schedsim.gpu.power`: the steady power state (GEMMs slowed by the tensor-core duty).
"""
