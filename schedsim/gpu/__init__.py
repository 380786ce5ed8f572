"""The GPU compute model: what one GPU does with the ops a rank issues (the counterpart of :mod:`schedsim.network`).

One module per part (Calculon's one class per part; ASTRA-sim's compute API is the interface's anchor):

* :mod:`schedsim.gpu.cost`: the solo (uncontended) duration of each op (:class:`~schedsim.gpu.cost.CostModel`, over
  one class per part: :class:`~schedsim.gpu.cost.Roofline`, :class:`~schedsim.gpu.cost.CopyEngines`,
  :class:`~schedsim.gpu.cost.HostLaunch`, and :class:`~schedsim.gpu.gemm.GemmCost` in :mod:`schedsim.gpu.gemm`,
  the measured GEMM table and its per-shape kernel rows; communication is :mod:`schedsim.network`'s);
* :mod:`schedsim.gpu.rules`: the rules of the ``waves`` model (SMs, waves, queues, host issue), each described
  with its source;
* :mod:`schedsim.gpu.host`: the host thread (issue costs, first calls, graph launches);
* :mod:`schedsim.gpu.kernels`: kernel sizing (CTAs, SMs held, memory-bound boost);
* :mod:`schedsim.gpu.rates`: the rate functions and the tables the event loop reads;
* :mod:`schedsim.gpu.power`: the steady power state (GEMMs slowed by the tensor-core duty).

The rules of the ``waves`` model are named (described, with their sources, in :mod:`schedsim.gpu.rules`). Their
former numbers, for reading older notes, commits and ``benchmarks/`` logs:

=====  ==========================  ==========================================================================
old    name                        what it decides
=====  ==========================  ==========================================================================
1      ``host-issue``              when the rank's host thread issues each op (launch costs, first calls)
2      ``hardware-queues``         which of ``CUDA_DEVICE_MAX_CONNECTIONS`` queues an op's stream maps to
3      ``wave-dispatch``           FIFO block dispatch of CTAs in waves over the SMs
4      ``cta-count``               a kernel's CTAs and the SMs they hold
4b     ``split-k``                 a split-K GEMM's reduction kernel
4c     ``wave-tail``               the ragged end of a GEMM's last wave
5      ``hbm-share``               memory-bound kernels sharing HBM bandwidth
6      ``nccl-sms``                NCCL kernels' SMs, links and slowdown beside compute
6b     ``one-rank-collective``     a collective of one rank: a copy, no NCCL kernel
7      ``communicator-order``      each communicator's ops in issue order
8      ``graph-forks``             forks in a CUDA graph
9      ``graph-nodes``             graph node times, operands from HBM past L2
=====  ==========================  ==========================================================================
"""
