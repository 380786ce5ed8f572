"""Rules of the ``waves`` GPU execution model: how a GPU and its host thread run one rank's ops.

The event loop (compiled, :mod:`schedsim.sim._cwaves`) only moves time forward; every rule it
applies lives here, as data computed once per simulation (:class:`GpuRules`;
host issue times, hardware queues and communicator order as vectorised functions
of op columns, :func:`~schedsim.gpu.host.host_issue_columns`, :func:`stream_queue_columns`,
and communicator order in C (``_cwaves.fifo_edges``; the Op-list form :func:`stream_queues` calls the second; the
numpy and Op-list forms of the others are test oracles, ``tests/oracle/``); per-template rules such as
:func:`kernel_ctas`) or as small pure rate functions tabulated for the compiled
loop (:func:`rate_tables`). :mod:`schedsim.sim.waves_columns` applies them to a
Program's columns (the test oracle ``tests/oracle/waves_loop.py`` to lists of Op objects).

The rules below are described here, in one place; their code is split by what it computes: host issue
(rule host-issue) in :mod:`schedsim.gpu.host`, kernel sizing (CTAs, wave tails, split of work) in
:mod:`schedsim.gpu.kernels`, the rate functions and their tables in :mod:`schedsim.gpu.rates`, and
:class:`GpuRules`, hardware queues, communicator order, CUDA-graph nodes and memory terms here.

Rules and their sources
-----------------------
Each rule has a name, used in code, notes and errors (the numbers they once had: :mod:`schedsim.gpu`).

* ``host-issue``: **Host thread** (one per rank; PyTorch's Python thread). It issues the rank's
   ops in *program order* (the order of the ops of that rank after lowering:
   hand-written ops as written, then a pipeline block's ops), each costing host
   time by kind (profile ``launch``): a kernel ``eager_per_op_us`` (× ``repeat``;
   a GEMM whose shape has a ``gemm.call`` row costs that multiple of it: bf16
   1024×512×8192, a split-K call of two kernels, 1.31×; a ``compute`` op given
   only ``bytes`` is an elementwise ``torch.add`` in ``execute`` and the
   hand-written references: ``elementwise_call_us``, which ``calibrate``
   measures on that call; formerly it was charged the 4 KiB pinned
   ``copy_`` of ``memcpy_call_us``, which the add exceeds 1.48× (6 fresh
   processes, one H200, [evidence: elementwise-host])),
   a collective ``eager_per_collective_us`` (calls back to back; right after a call
   of another kind on the rank, a kernel's, a copy's or a graph launch's,
   ``collective_after_kernel_us`` where the profile has it; a rank's k-th
   collective call ``collective_warmup_us[k - 1]`` more, where the list has it:
   :func:`collective_after_call_extra`), a lone isend/irecv ``p2p_call_us``,
   one ``batch_isend_irecv`` call ``batch_p2p_call_us`` for its whole batch, a
   copy ``memcpy_call_us``, plus ``event_wait_us`` per dependency on another
   stream (event record + wait), ``stream_switch_us`` when the op's stream differs
   from the previous op's on the rank (entering ``with torch.cuda.stream(s)``:
   8.7 µs = 18.4 µs for a switch + ``add_`` − 9.7 µs for the ``add_`` alone, 2×H200,
   [evidence: 2xh200-concurrency]; the rank's first op pays no switch here:
   calibrate times the switch to the iteration's stream with the first call,
   inside ``first_op_extra_us``, as the programs make it) and the op's declared ``host_us`` (Python time
   before the call). A kernel reaches the GPU part-way through its call,
   ``launch.call_launch_fraction`` of the call's host time in (default 1: at its
   return; ``calibrate`` measures it: a matmul's launch comes before the output's
   bookkeeping and the return, :func:`kernel_release`; a GEMM shape with a
   ``gemm.memset`` row launches a memset there and its main kernel that row's
   gap later, which an idle GPU waits for); in an eager run timed op
   by op an op also ends no earlier than its end event's record, after its call
   (:func:`end_event_bound`). The
   language has no host-blocking op (``.item()``, ``synchronize``), so the host
   never waits for the GPU and issue times are prefix sums. A CUDA graph replay
   replaces all of this with one ``graph_launch_us`` (its Python is not
   replayed, so ``host_us`` is skipped) and adds ``graph_per_op_us`` of GPU time
   per node; its nodes reach the GPU when the launch returns, or
   ``graph_start_us`` after the launch began where calibrate measured that.
   A replay timed op by op, as ``schedsim execute --cuda-graph`` times it
   (an event pair around every op), adds ``graph_timing_event_us`` per node too
   (:meth:`~schedsim.hardware.profile.HardwareProfile.timed_graph`). The rank's
   first kernel launch and its first communication call of the iteration add
   ``first_op_extra_us`` / ``first_collective_extra_us``: the
   host has just waited for the device, and a first call runs cold (2×H200,
   ``benchmarks/probes/gpu_state/after_aligned_start.py``: first 1024² linear 42 µs against
   24 µs later, first 4 KiB all_reduce 82 µs against 45 µs). After an iteration in
   which the host waited ``cold_wait_us`` or longer for the GPU (every
   iteration ``execute`` times starts after the last one's end), the first
   kernel, collective and elementwise calls also add ``cold_first_call_us``
   (:func:`host_waited`; the loops run such an iteration a second time, cold):
   one H200, ``execute``'s ``meta.host_call_end_s`` showed first calls
   +0–8 µs after host-bound iterations and +19–59 µs after GPU-bound ones
   ([evidence: dispatch-order]). Host costs: PyTorch
   eager add ≈ 8 µs host (A100, flagos-ai/Torch-FL PR 27), c10d collective calls
   89–131 µs (pytorch issue 138773); measured on 2×H200 [evidence: h200x2-calibration] by
   ``schedsim calibrate`` for the ``h200x2`` profile. A host synchronisation (rule host-wait,
   :mod:`schedsim.sim.host_wait`: ``kind: synchronize``, an import's recorded wait) shifts the issue times of
   the rank's later calls by the time the host stood blocked, in the loop (``_cwaves.c``, ``host_resolve``).
* ``hardware-queues``: **Hardware queues.** A context has ``CUDA_DEVICE_MAX_CONNECTIONS`` work
   queues (1–32, default 8; CUDA programming guide, appendix "Environment
   variables"). Stream ``s`` of a rank (numbered by first appearance in program
   order) uses queue ``s mod C``. A queue hands its items to the GPU in issue
   order, and an item that is not yet ready (stream predecessor or awaited event
   unfinished) holds up everything behind it in the queue (false dependencies;
   CUDA C programming guide, "Implicit synchronization"/Hyper-Q; Megatron-LM
   issue 533). With C = 1 every kernel starts in host issue order.
* ``wave-dispatch``: **Block dispatch, waves.** Kernels handed to the GPU wait in one FIFO per
   GPU (ordered by hand-over time, then program order, so kernels released by
   the same event queue in issue order, as the host issued them); the head
   kernel places its CTAs on free SMs, and the next kernel gets
   SMs only when the head has placed all of them (no preemption; CUDA runtime
   API, stream priorities only bias pending blocks; GPGPU-Sim / Accel-Sim take
   CTAs from the current kernel until it has none left). One CTA per SM (large
   Hopper GEMM tiles use most of an SM's shared memory and registers). A kernel
   of C CTAs alone runs in ceil(C / SMs) waves, so each CTA lasts
   solo_time / waves (NVIDIA "Matrix multiplication background" guide: a partial
   last wave costs a full wave). Start = first CTA placed, end = last CTA done
   (as CUPTI reports); an eager kernel whose time is a back-to-back table's
   reports its start ``launch.kernel_gap_us`` later (the dispatch gap the table
   holds, :func:`schedsim.sim.engine.kernel_gaps`). An op whose last dependency to end is on another
   stream of its rank (an event wait) is handed over ``gpu.cross_stream_latency_us``
   later than a same-stream successor would be: the queue resolves the wait
   (2×H200, [evidence: accuracy-h200]: 6.05 µs from a GEMM's end to the start event of its
   successor on another stream against 2.90 µs on the same stream, median of 64
   layers of small_ops_graph in a CUDA graph, so 3.15 µs). Released at one
   instant, the same-stream kernel therefore takes the SMs first: in the
   pipeline runs of that day a send released by a backward GEMM waited behind
   the next GEMM of the compute stream (0.59 ms for 32 MiB, 0.11 ms alone).
   So two GEMMs that fill the GPU on two streams run one
   after the other, and a small kernel on a third stream waits for free SMs.
   Kernels handed over at one instant, on any rank, take their SMs once every
   event of that instant is done: a collective whose last member arrives at the
   instant its other members issued the GEMM after it (each rank's FIFO in
   issue order) then starts before that GEMM on every member, as on one queue a
   real NCCL kernel is launched before the GEMM and holds its SMs while it waits
   for its peers; identical ranks so run alike whatever order the loop meets
   them in (``tests/sim/test_training_symmetric.py``).
* ``cta-count``: **CTA counts.** GEMM: the grid (x·y·z) the BLAS library launched for that
   shape when the profile records it (``gemm.ctas``; ``calibrate`` reads it from
   a Kineto trace), run in ceil(CTAs / SMs) waves; for a persistent kernel (a
   grid of one CTA per SM looping over more output tiles) ``calibrate`` records
   the tiles, whose last partial "wave" is the CTAs with one tile fewer exiting
   early: one H200, bf16 4096×2048×8192 ran 132 CTAs over 256 tiles
   and a GEMM queued on another stream started on 8 SMs half-way through it
   ([evidence: dispatch-order]). One H200
   ([evidence: coresidence]): allgather_mm's
   fp32 2048×1024×8192 and 1024×512×8192 ran as 128 CTAs (256×128 tiles with
   split-K 2 and 8), so 4 of 132 SMs stay free for other streams, and 8 or 16
   such GEMMs on as many streams ran 2.7 / 6.0 % faster per GEMM than on one
   stream; their kernels hold 254 / 202 registers × 256 threads (one CTA per
   SM), so the gain is those free SMs and the hidden tail, not two CTAs sharing
   an SM. Otherwise: ceil(m·batch/128)·ceil(n/128) output tiles of 128×128
   (CUTLASS/cuBLAS's common Hopper tile).
   A measured grid of at least a wave runs one CTA per tile in waves, each CTA
   lasting solo / ceil(CTAs / SMs), so its partial last
   wave frees SMs for other streams' kernels and a queued kernel fills them: the
   2×H200 probe [evidence: 2xh200-concurrency] ran bf16 8192³ as 2048 CTAs of 128×256 (Kineto)
   and a 1024³ GEMM on a third stream ended 0.14 ms *before* the queued second
   big GEMM, which a persistent one-CTA-per-SM GEMM (this rule at first)
   cannot give; and in the allgather_mm runs of [evidence: accuracy-h200] the
   multi-wave fp32 GEMMs (chunks 2 and 4: 2048 and 512 tiles) kept their solo
   time beside a concurrent all_gather (10.97 ms against 11.13 ms solo) where
   the persistent rule stretched them by the all_gather's whole time. Without
   a measured grid the tile width, hence the last wave's size, is unknown, and
   the solo time (often a table row or curve of another shape) does not hold
   the idle SMs a guessed half-empty wave would give away, so a GEMM of at
   least a wave of 128×128 tiles fills all its waves (ceil(tiles / SMs)·SMs
   CTAs): S0 on ``pcie2`` (114 SMs, no ``gemm.ctas``), 8 chunks, 75.49 ms
   measured, was predicted 49.21 ms when the other streams' GEMMs filled each
   2048×1024×8192 sub-GEMM's guessed 14-CTA second wave, and 76.44 ms with full
   waves (``tests/sim/test_real_input.py``). With
   fewer tiles than SMs the GEMM is split-K
   (:meth:`schedsim.gpu.cost.CostModel.gemm_ctas`) and capped at one wave (the
   split factor is a guess, so the wave count is not extrapolated from it). A
   GEMM that finds only some SMs free starts on those and places the rest as
   SMs free up (its span stretches: the ~2× of an H100 GEMM pushed into a
   second wave by a 24-CTA all_gather, NVIDIA forum thread 337991). Other
   kernels: one CTA per 64 KiB moved, at most one wave (elementwise kernels are
   launched wide and grid-stride). A ``compute`` op given ``duration_us`` (or FLOP without bytes) is a kernel
   of unknown grid, often a measured stage time of many kernels (Zero Bubble's T_F / T_B / T_W, DualPipe's
   per-chunk times), measured with its pipeline's NCCL kernels beside it. It runs as one wave of
   SMs − ``nccl.sms_per_collective`` CTAs, each lasting its duration: alone it takes its duration, and an
   NCCL kernel of its rank (one CTA per channel, each on its own SM, as few SMs as the links need: NCCL
   issues 689 and 181) starts beside it at once instead of waiting for it, and, already resident, does not
   push part of it into a second wave (which doubles a kernel's time: the ~2× of an H100 GEMM of exactly
   one wave beside a 24-CTA all_gather, NVIDIA forum thread 337991, is a property of a known full-wave
   grid, not of an unknown one). Two NCCL kernels resident beside it at once still hold back its last
   ``nccl.sms_per_collective`` CTAs (not modelled otherwise). Filling the GPU instead made ZB-H1 slower
   than 1F1B with equal measured F, B and W times (``tests/gpu/test_gpu_model.py``), against the 0.868×
   PaddlePaddle issue 62865 measured.
   A GEMM whose kernel fits several CTAs on one SM (``gemm.ctas_per_sm``: the
   CUDA occupancy calculation from its block size, registers and shared memory,
   which ``calibrate`` reads from a Kineto trace) counts ceil(CTAs / that) SMs:
   one H200, small_ops_graph at fp32 16×1024 (two 128-CTA GEMMs on
   two streams) ran 12.99 µs per layer against 16.4 predicted with one CTA per
   SM (``benchmarks/accuracy/heldout.sh graph_shapes``). Not modelled: CTAs of two
   different kernels sharing one SM (an elementwise kernel's small CTAs may fit
   beside a 202-register GEMM CTA), and, for shapes without a
   measured grid, the real tile width and last wave (cuBLAS ran bf16 8192³ as
   128×256 tiles, a half-empty last wave; ``calibrate`` records such grids).
   ``split-k``: **Split-K reductions.** cuBLAS runs some GEMMs as two kernels: the main
   one and a reduction of the split-K partials (``..._execute_split_k_kernel``),
   launched into the same stream. A GEMM with a ``gemm.reduce`` row (its
   CTAs and time alone, from the Kineto record ``calibrate`` reads) runs its
   main kernel on the op's time less the reduction's, then hands the reduction
   to the GPU's dispatch FIFO when the main kernel's last CTA is done; the op
   ends with it. The reduction is its hardware queue's next item (rule hardware-queues): a
   later kernel of a stream sharing that queue (``max_connections`` 1, or more
   streams than queues) is handed over only after it. Beside other streams' GEMMs the reduction waits for SMs like
   any kernel: one H200, [evidence: stream-dispatch], matmul_streams chunks 8 (fp32
   2048×1024×8192, 128-CTA main kernel 0.70 ms, 128-CTA reduction 6.3 µs alone)
   ran its reductions 108–201 µs beside the other streams' GEMMs, and each
   stream's ``add`` queued behind them (measured add spans 0.93 ms, 2.26 ms
   predicted with one kernel per GEMM; per-op median 40 % → 17.7 % replayed with
   the reduction as a kernel of its own,
   [evidence: stream-dispatch]).
   ``wave-tail``: **Ragged wave ends.** A wave's CTAs do not end together; back to back
   on one stream a kernel's last wave holds its SMs until its slowest CTA
   ends (the table time includes that), but a compute kernel waiting for SMs
   takes each one as it frees. So once a kernel has every CTA placed, its
   main kernel's batches (waves of τ) run at 1 / (1 − min(tail / τ, 0.25))
   while its rank's dispatch FIFO holds a compute kernel (NCCL kernels, a few
   SMs each, are not counted; a split-K reduction gets no gain), tail = the
   GEMM shape's ``gemm.tail`` row, else the nearest measured shape's of its
   dtype (:meth:`schedsim.gpu.cost.CostModel.wave_tail`), else (no row of the
   dtype, or not a GEMM) ``gpu.wave_tail_us``; ``calibrate`` fits a row per
   schedule GEMM of at least half a wave run on 8 streams
   (:func:`executor.calibrate_waves.fit_wave_tail`). The
   tail is a time, not a fraction of the wave: one H200, [evidence: wave-tail],
   8 streams × 8 fp32 GEMMs against the same 64 back to back, fitted per shape
   with this model: 1024×512×8192 (0.180 ms) 8.8 µs, 2048×1024×8192 (0.700 ms)
   8.1 µs, 4096×2048×8192 (two waves, 2.665 ms) 10.7 µs
   ([evidence: wave-tail]). With one connection a
   stream's next kernel is often not handed over behind another stream's
   (rule hardware-queues), so no gain.
* ``hbm-share``: **HBM.** A memory-bound kernel (roofline: bytes / HBM bandwidth ≥ FLOP /
   peak; a bytes-only ``compute`` op, PyTorch's elementwise ``add_``) runs as
   one CTA per 64 KiB moved, in up to 4 waves (PyTorch launches one block per
   few KiB, not a grid-stride loop: a 50.3 MB bf16 ``add_`` ran 8,187 blocks,
   one H200), so that the SMs a GEMM frees are taken by its last
   CTAs a fraction of its time at a time; wider than the GPU, it fills whole
   waves, so that alone it takes its solo time. The memory-bound kernels resident
   on a GPU share HBM: with each holding ``h`` of the ``w`` SMs it holds alone
   (min(its CTAs, SMs)), their CTAs run ``min(β, 1 / Σ h/w)`` times their solo
   speed (:func:`mem_rate`), β = SMs · ``gpu.sm_stream_GBps`` / ``gpu.hbm_GBps``
   (at least 1): two kernels that each saturate HBM alone run at 1/2, one
   kernel on the few SMs other streams' GEMMs leave free streams faster per SM
   than its share of HBM. One H200
   (``benchmarks/probes/sm/dispatch_order.py``): bf16
   ``add_`` of 12.6 and 50.3 MB on the 4 SMs a 128-CTA GEMM left free moved
   0.275 TB/s (69 GB/s per SM; 31.5 GB/s is an SM's share of 4.16 TB/s), and
   in allgather_mm bf16 chunks 4 an add beside a 132-CTA GEMM ran on the 8 SMs
   the GEMM's one-tile CTAs freed half-way and ended 2 µs after the GEMM.
   Formerly each of k memory-bound kernels resident at once ran at
   1/k, and a bytes-only kernel was one wave.
* ``nccl-sms``: **NCCL kernels** occupy ``nccl.sms_per_collective`` SMs (one CTA per channel,
   each on its own SM: NCCL issues 689 and 181) from when they are placed until
   the collective ends. A kernel joins its GPU's dispatch FIFO once every rank
   of its collective (or send/recv pair) has handed its kernel over, and the
   transfer starts once every rank's kernel is resident (so a kernel's span
   includes the other ranks' wait for SMs; NCCL issue 146). Real NCCL kernels
   also spin on their SMs while a slower rank has not launched yet; holding
   SMs for that whole time stretched every GEMM beside a posted recv and made
   pipeline predictions 30–80 % long against the 2×H200 runs [evidence: accuracy-h200], so
   that spin is not modelled (an assumption: the probes [evidence: 2xh200-concurrency] issue on
   both ranks at once and cannot test it; ``benchmarks/probes/run.sh scenarios_peer_wait``
   does). It then runs at 1/f with
   f = 1 + (``slowdown_beside_gemm`` − 1)·min(1, SMs held by compute / SMs not
   held by NCCL), slowest rank wins. The 3.5× first seen for allgather_mm
   on 2×H200 was mostly the wait for SMs that rules wave-dispatch and nccl-sms already give: a
   collective issued beside a queue of wave-filling GEMMs waits for the running
   GEMM, then runs at 1.05–1.07× its solo time ahead of the next GEMM (2×H200,
   [evidence: 2xh200-concurrency]), so ``h200x2`` sets 1.06. Links are
   full duplex (NVLink, PCIe, NICs): a rank's link has an out and an in direction
   (:func:`link_ends`); a send uses its rank's out and its peer's in, a collective
   both directions of every rank, and k transfers on one direction share it at
   1/k each. On a cluster topology a rank has two links, its scale-up link and its
   NIC: transfers between nodes use the NIC (a collective across nodes both), and
   NICs (GPUs that share one included) and oversubscribed leaf uplinks are shared
   max-min fair between those flows instead (:mod:`schedsim.network.share`: a NIC
   end is worth the comm rate × the flow's share, not / k).
   So a batched send+recv pair runs in one exchange time, which is what
   the ``sendrecv`` table holds (calibrate times a batch_isend_irecv ring), while
   two sends of one rank share its link (measured on 2×H200, [evidence: 2xh200-concurrency]: batched
   exchange 271.6 µs at 64 MiB ≈ 1.3× one way, unbatched 428.6 µs ≈ 2×). A
   send/recv whose reverse directions are idle runs ``nccl.p2p_one_way_speedup``
   times faster than that exchange time (``h200x2``: 271.6 / 203.6 = 1.33 at
   64 MiB, the GPU-bound point of the same probe).
   Compute CTAs run ``gemm_slowdown_beside_nccl`` times slower while an NCCL
   kernel is resident. Copies run on their copy engine (one per direction) in
   FIFO order, with the profile's copy contention factors; an h2d and a d2h copy
   running at once slow each other (``h2d_slowdown_beside_d2h``,
   ``d2h_slowdown_beside_h2d``: PCIe carries less than twice one direction's
   bandwidth, :func:`copy_rate`).
   ``one-rank-collective``: **Collectives of one rank** (world 1, or a group of one) launch no NCCL
   kernel: NCCL 2.28.9 and 2.30.7, ``src/enqueue.cc`` ``taskAppend``, ``if
   (comm->nRanks == 1) ncclLaunchOneRank(...)``, and ``src/device/onerank.cu``:
   a ``cudaMemcpyAsync`` from send to receive buffer on the op's stream when
   they differ, nothing when they are the same (in place), a small reduce
   kernel only for ``ncclAvg``/PreMulSum, which schedsim does not express.
   Such an op joins no rendezvous and holds no NCCL SMs (:func:`schedsim.lower.program.split_one_rank`,
   :func:`one_rank_res`), stays in its communicator's order (rule communicator-order) and costs
   the host a collective call (rule host-issue). The kinds the executor calls out of
   place (all_gather, reduce_scatter, all_to_all, scatter, gather) are a
   same-device copy of ``nbytes``, which CUDA runs on the SMs: it waits for SMs
   as a kernel does (a ``copy_`` "Memcpy DtoD" beside a GEMM starts in its last
   wave, ``benchmarks/probes/sm/copy_beside_gemm.py``), so it is a memory-bound
   kernel moving 2 × ``nbytes`` (read and written; rule hbm-share) for its solo time
   (:meth:`schedsim.network.model.NetworkModel.collective`, at ``memcpy.d2d_GBps``).
   The in-place kinds (all_reduce, broadcast, reduce) put nothing on the GPU:
   an empty item on the rank's device-to-device copy engine, which neither
   holds nor waits for SMs. The measurements behind both: docs/validation.md,
   "One-rank collectives and measured GEMM rows".
* ``communicator-order``: **Communicators.** PyTorch's ProcessGroupNCCL runs all ops of one process
   group on one NCCL stream per device, so on each rank the ops of a
   communicator run in issue order, each after the previous ends. A
   collective's communicator is its group. With ``nccl.unbatched_p2p_serialized``
   (PyTorch eager init, ``device_id`` given: pytorch PRs 132900/154132) a lone
   send/recv joins the order of the communicator of its two ranks (with two
   ranks, the default group's: "in issue order with everything else on it", as
   measured on 2×H200); a wider default group is not assumed, as
   pipeline schedules lowered for per-pair communicators would then hang. Without
   it, lone send/recv progress independently (lazy init, one communicator per
   pair). The ops of one ``p2p_batch`` (``batch_isend_irecv``) are one fused
   kernel and one entry in the order of their process group's communicator (its
   written ``group:``, else its family's: :func:`schedsim.lower.p2p_comms.batch_communicators`,
   the group ``execute`` posts it on) (NCCL docs,
   "Point-to-point communication": calls inside a group progress concurrently).
   That kernel takes its SMs once the first of its members has its partner
   posted; each member's transfer starts once its own partner is there, so a
   member never waits for another member's partner (NCCL progresses the members
   of a group independently; a Megatron interleaved batch holding a send and a
   recv of two different steps would otherwise hang).
* ``graph-forks``: **Forks in a CUDA graph.** In a graph replay, a node with a dependent on
   another stream of its rank (an event edge: the graph forks there) holds its
   own stream ``launch.graph_cross_stream_edge_us`` longer (added to its solo
   time, :func:`graph_fork_columns`; collectives and p2p are left as they are),
   or, for a fork at a GEMM whose shape has a ``launch.graph_fork_edges`` row,
   that row: the term depends on the shape. ``calibrate`` measures both as the
   GPU time per layer of 64 layers (GEMM, m×n copy, the same GEMM on another
   stream waiting for the first) over the main stream alone, less what this
   model gives for that difference; one H200, with rule graph-nodes in the
   model: 0.32 / 0.37 / 1.69 / 3.11 / 3.08 µs at bf16 T×H×H GEMMs of T×H =
   8×256, 16×512, 32×1024, 16×2048, 64×2048 (``benchmarks/probes/memory/l2_residency.py``).
   The cause (the aux GEMM released beside the main stream's next GEMM slows it,
   far more than an aux chain without the edge does) is not modelled as such.
   One H200 (``benchmarks/probes/graph/node_time.py``, 64 layers
   of small_ops_graph's ops in one graph): 7.94 µs per layer when each aux GEMM
   waits for its layer's main GEMM, 6.65 µs when it does not wait, 6.23 µs for the
   main stream alone: 1.29 µs per layer, of which the model without this rule
   already gives 0.11 µs (the aux GEMM's later start), so 1.18 µs per fork.
   And the steady power state (:mod:`schedsim.gpu.power`) slows every GEMM
   when tensor cores stay busy.
* ``graph-nodes``: **Graph nodes and operands from HBM** (:func:`memory_terms`). The GEMM
   table and the kernel floor are back-to-back times on a stream with operands
   in L2 (calibrate rotates 3 input sets). In a CUDA graph a GEMM with a
   ``gemm.graph`` row takes its measured node time; any other kernel adds
   ``launch.graph_per_op_us`` (negative on H200: a node runs 0.75-0.90 µs shorter
   than back to back, every small kernel measured [evidence: timed-graph]). ``execute``
   gives every op its own buffers, so a rank whose working set (the sum of its
   ops' buffer bytes, :meth:`~schedsim.gpu.cost.CostModel.footprint`) exceeds L2
   reads them from HBM every iteration: each kernel then adds
   :meth:`~schedsim.gpu.cost.CostModel.cold_extra` (the row's cold − warm, else
   ``gpu.hbm_miss_us`` for a GEMM or a floor-bound kernel), scaled by the
   rank's cold fraction, 0 below ``gpu.l2_cold_span[0]`` × ``gpu.l2_bytes`` and 1
   above ``[1]`` × it, linear in between. An eager kernel's base is the back-to-back table, which
   ``calibrate`` times on 3 rotating input sets: where they pass L2 the table already read from HBM,
   by as much as its time less the dispatch gap exceeds the row's warm node time
   (:meth:`~schedsim.gpu.cost.CostModel.table_hbm_s`); the extra leaves that out (one H100: bf16
   1024×512×8192 22.58 µs back to back against a 19.13 / 21.56 µs warm / cold node; docs/validation.md,
   "Operands from HBM the table already holds"). One H200
   (``benchmarks/probes/memory/l2_residency.py``, graph chains, µs per kernel, L2 →
   HBM): bf16 16×512×512 2.79 → 3.12, 32×1024×1024 3.49 → 4.45, 64×2048×2048 5.35
   → 6.41, 16×4096×4096 9.46 → 13.51, 2048³ 23.3 → 24.4; fp32 1×1024×1024 7.72 →
   12.58; ``add_`` on 32×1024 bf16 1.17 → 1.73; and 64 layers of small_ops_graph
   (each kernel its own buffers) ran 4.58 / 6.20 / 8.31 µs per layer on the main
   stream at T×H 16×512 / 32×1024 / 64×2048, the sums of those cold node times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schedsim.arrays import first_table
from schedsim.gpu.cost import CostModel
from schedsim.gpu.kernels import mem_boost
from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS, P2P_KINDS
from schedsim.lower.program import split_one_rank

__all__ = ["GpuRules", "communicator", "graph_fork_columns", "l2_cold_fraction",
           "link_ends", "memory_terms", "one_rank_res", "split_one_rank", "stream_queue_columns", "stream_queues"]


@dataclass(frozen=True)
class GpuRules:
    """The numbers the ``waves`` loop needs, in SI units (seconds).

    Built by :meth:`from_profile`; ``max_connections`` may be overridden by the
    schedule's ``env`` or ``predict --max-connections``.
    """

    sms: int
    max_connections: int
    nccl_sms: int
    nccl_slowdown: float
    gemm_slowdown_beside_nccl: float
    p2p_serialized: bool
    p2p_one_way: float
    copy_slowdown_with_compute: float
    compute_slowdown_with_copy: float
    cross_stream_s: float = 0.0
    h2d_beside_d2h: float = 0.0  # contention.h2d_slowdown_beside_d2h
    d2h_beside_h2d: float = 0.0  # contention.d2h_slowdown_beside_h2d
    mem_boost: float = 1.0  # rule hbm-share's β: sms · gpu.sm_stream_GBps / gpu.hbm_GBps, at least 1

    @classmethod
    def from_profile(cls, profile: HardwareProfile, max_connections: int | None = None) -> GpuRules:
        """Rules of ``profile``; ``gpu.sms`` missing means 132 (H100/H200 SXM)."""
        sms = profile.gpu.sms or 132
        nc = profile.nccl
        return cls(sms=sms, max_connections=max_connections or profile.gpu.max_connections,
                   nccl_sms=min(nc.sms_per_collective, sms), nccl_slowdown=nc.slowdown_beside_gemm,
                   gemm_slowdown_beside_nccl=nc.gemm_slowdown_beside_nccl, p2p_serialized=nc.unbatched_p2p_serialized,
                   p2p_one_way=nc.p2p_one_way_speedup,
                   copy_slowdown_with_compute=profile.contention.copy_slowdown_with_compute,
                   compute_slowdown_with_copy=profile.contention.compute_slowdown_with_copy,
                   cross_stream_s=profile.gpu.cross_stream_latency_us * 1e-6,
                   h2d_beside_d2h=profile.contention.h2d_slowdown_beside_d2h,
                   d2h_beside_h2d=profile.contention.d2h_slowdown_beside_h2d,
                   mem_boost=mem_boost(profile, sms))


def unique_keys(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(values, first, inverse)`` of a 1-d integer array, as :func:`schedsim.lower.program.unique` gives
    them (int64 ``first``: index of each value's first occurrence; ``inverse``: index of each element's value
    in ``values``). Keys in a small range (0 ≤ key < 4n + 64, as rank × stream or rank × queue codes are)
    go through a table of the range, O(n) without a sort; others through ``unique``'s stable sort."""
    n = len(key)
    first = first_table(key)
    if first is not None:
        vals = np.flatnonzero(first < n)
        code = np.zeros(len(first), np.int64)
        code[vals] = np.arange(len(vals))
        return vals.astype(key.dtype), first[vals], code[key]
    from schedsim.lower.program import unique

    return unique(key)


def stable_order(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` of non-negative integer keys; keys below 2**16 are sorted as uint16,
    which numpy's stable sort orders by radix sort in O(n) (rank × queue and rank × communicator codes are)."""
    if len(key) and int(key.min()) >= 0 and int(key.max()) < 1 << 16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    return np.argsort(key, kind="stable")


def graph_node_terms(profile: HardwareProfile, mode: str) -> tuple[float, float]:
    """``(timing_s, empty_s)``: seconds the timing events of a graph timed op by op add to every op that runs a
    kernel (``launch.graph_timing_event_us``, when ``launch.graph_timed``:
    :meth:`~schedsim.hardware.profile.HardwareProfile.timed_graph`), and the span of a timed op that runs nothing
    (its two events adjacent: ``launch.graph_timing_gap_us``, default the former). One H200: 2.0-2.2
    µs around a kernel, 1.25-1.28 µs between adjacent events (``benchmarks/probes/graph/timing_events.py``), and 1.2-1.3
    µs measured for one-rank all_reduce ops in timed graphs (``benchmarks/accuracy/heldout.sh x1``).
    An eager run timed op
    by op (``launch.eager_timed``: :meth:`~schedsim.hardware.profile.HardwareProfile.timed_eager`) holds the same
    terms: its events are the same stream operations, launched by the host instead of the graph (2.1-3.2 µs and
    1.3-1.6 µs on one H200). Both 0 unless the run is timed that way (a graph in ``cuda_graph`` mode,
    an eager run in ``eager`` mode). A node's own term is per op (:func:`memory_terms`); :func:`node_work` applies
    them all."""
    lp = profile.launch
    if not (lp.graph_timed if mode == "cuda_graph" else lp.eager_timed):
        return 0.0, 0.0
    gap = lp.graph_timing_event_us if lp.graph_timing_gap_us is None else lp.graph_timing_gap_us
    return lp.graph_timing_event_us * 1e-6, gap * 1e-6


def node_work(work: float, node_s: float, timing_s: float, empty_s: float, extra_s: float = 0.0) -> float:
    """An op's solo seconds: its own ``work`` plus, if it runs on the GPU at all, ``node_s`` (its graph node,
    rule graph-nodes: :func:`memory_terms`), ``timing_s`` (its timing events in a timed graph) and ``extra_s`` (its
    operands
    from HBM, rule graph-nodes); an op of no work (a one-rank in-place collective, which NCCL does not launch) is no
    node and
    spans ``empty_s`` (adjacent timing events). Always adds, so -0.0 becomes 0.0 as in :func:`node_work_columns`."""
    return work + ((node_s + timing_s + extra_s) if work > 0 else empty_s)


def node_work_columns(work: np.ndarray, node_s: np.ndarray | float, timing_s: float, empty_s: float,
                      extra_s: np.ndarray | float = 0.0) -> None:
    """:func:`node_work` on a float array of solo seconds, in place (the same additions, in the same order);
    ``node_s`` and ``extra_s`` scalars or arrays of the same shape as ``work``."""
    if np.isscalar(node_s) and np.isscalar(extra_s) and not (node_s or timing_s or empty_s or extra_s):
        work += 0.0  # eager without rule graph-nodes terms: one pass, no temporaries
        return
    terms = np.add(node_s + timing_s, extra_s)  # (node_s + timing_s) + extra_s, a fresh array when either is one
    if terms.shape != work.shape:  # scalars: where it is not
        work += np.where(work > 0, terms, empty_s)
        return
    # ``empty_s`` written over the terms where there is no work: np.where(work > 0, terms, empty_s) in place
    idle = work > 0
    np.logical_not(idle, out=idle)
    np.copyto(terms, empty_s, where=idle)
    del idle
    work += terms


def l2_cold_fraction(ws: np.ndarray, profile: HardwareProfile) -> np.ndarray:
    """Rule graph-nodes: fraction (0-1) of a rank's kernels' operands read from HBM, per rank, from its working set
    ``ws`` (bytes, shape (ranks,)): 0 below ``gpu.l2_cold_span[0]`` × ``gpu.l2_bytes``, 1 above ``[1]`` × it, linear
    between; all 0 when the profile has no ``gpu.l2_bytes``."""
    g = profile.gpu
    ws = np.asarray(ws, float)
    if not g.l2_bytes:
        return np.zeros_like(ws)
    lo, hi = g.l2_cold_span
    x = ws / g.l2_bytes
    if hi <= lo:
        return (x > lo).astype(float)
    return np.clip((x - lo) / (hi - lo), 0.0, 1.0)


def memory_terms(tps: Sequence[Op], tmpl: np.ndarray, rank: np.ndarray, world: int, cost: CostModel,
                 mode: str) -> tuple[np.ndarray | float, np.ndarray | float]:
    """Rule graph-nodes per op (:func:`_memory_terms`, its docstring)."""
    terms = _memory_terms(tps, tmpl, rank, world, cost, mode, False)
    assert terms is not None  # per op: always
    return terms


def template_memory_terms(tps: Sequence[Op], tmpl: np.ndarray, rank: np.ndarray, world: int, cost: CostModel,
                          mode: str) -> tuple[np.ndarray | float, np.ndarray | float] | None:
    """Rule graph-nodes per template, where they are its ops' own (:func:`_memory_terms` with ``per_template``), else
    None."""
    return _memory_terms(tps, tmpl, rank, world, cost, mode, True)


def _memory_terms(tps: Sequence[Op], tmpl: np.ndarray, rank: np.ndarray, world: int, cost: CostModel,
                  mode: str, per_template: bool) -> tuple[np.ndarray | float, np.ndarray | float] | None:
    """Rule graph-nodes per op, shape (N,) each, or the scalar 0.0 where no op has the term: ``(node_s, extra_s)``, the
    seconds its CUDA-graph node adds (0 unless
    ``mode`` is ``cuda_graph``; :meth:`~schedsim.gpu.cost.CostModel.graph_node_delta`) and the seconds its operands
    from HBM add (:meth:`~schedsim.gpu.cost.CostModel.cold_extra` × its rank's :func:`l2_cold_fraction`, less, unless
    ``mode`` is ``cuda_graph``, what its back-to-back time already holds, at least 0:
    :meth:`~schedsim.gpu.cost.CostModel.table_hbm_s`). Op ``i`` is
    ``tps[tmpl[i]]`` on rank ``rank[i]`` (an Op list passes ``tmpl = arange(N)``); ranks are 0..world-1.

    ``per_template``: the terms of each template instead, shape (len(tps),) each (or the scalar 0.0), where they
    are its ops' own, bit for bit (every rank has one cold fraction: the same products and differences on the same
    values); None where they are not (ranks with different cold fractions)."""
    N = len(tmpl)
    node: np.ndarray | float = 0.0
    if mode == "cuda_graph" and N:
        tnode = np.array([cost.graph_node_delta(t) for t in tps], float)
        if tnode.any():
            node = tnode if per_template else tnode[tmpl]
    if not cost.profile.gpu.l2_bytes or not N:
        return node, 0.0
    textra = np.array([cost.cold_extra(t) for t in tps], float)
    if not textra.any():
        return node, 0.0
    foot = np.array([cost.footprint(t) for t in tps], float)
    ws = np.bincount(rank, weights=foot[tmpl], minlength=world)
    cold = l2_cold_fraction(ws, cost.profile)
    if not cold.any():
        return node, 0.0
    # one cold fraction for every rank, bit for bit (ranks alike): that value, not a gather of it per op (the same
    # products)
    bits = np.ascontiguousarray(cold, np.float64).view(np.int64)
    one = bool((bits == bits[0]).all())
    if per_template and not one:
        return None
    extra = textra.copy() if per_template else textra[tmpl]  # then in place: the same products and differences
    extra *= cold[0] if one else cold[rank]
    if mode != "cuda_graph":  # a back-to-back table time: less the HBM reads it already holds (CostModel.table_hbm_s)
        held = np.array([cost.table_hbm_s(t) for t in tps], float)
        if held.any():
            extra -= held if per_template else held[tmpl]
            np.maximum(0.0, extra, out=extra)
    return node, extra


def graph_fork_columns(N: int, src: np.ndarray, dst: np.ndarray, rank: np.ndarray, stream: np.ndarray,
                       profile: HardwareProfile, mode: str, per_op: np.ndarray | None = None) -> np.ndarray:
    """Rule graph-forks: extra solo seconds per op, shape (N,): for an op with a DAG successor on another stream of
    its rank
    when ``mode`` is ``cuda_graph``, ``per_op[i]`` (:meth:`~schedsim.gpu.cost.CostModel.graph_fork_s`: the row of its
    GEMM shape in ``launch.graph_fork_edges``) or, without ``per_op``, ``launch.graph_cross_stream_edge_us``; else
    0. ``src``/``dst`` are the DAG's edges (op indices), ``rank``/``stream`` int arrays of shape (N,)."""
    extra = profile.launch.graph_cross_stream_edge_us * 1e-6
    out = np.zeros(N)
    if mode != "cuda_graph" or not fork_terms(profile) or not len(src):
        return out
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    fork = src[(rank[src] == rank[dst]) & (stream[src] != stream[dst])]
    out[fork] = extra if per_op is None else per_op[fork]
    return out


def fork_terms(profile: HardwareProfile) -> bool:
    """Whether rule graph-forks adds anything with ``profile``: an edge term above 0 or a per-shape row other than 0."""
    lp = profile.launch
    return lp.graph_cross_stream_edge_us > 0 or any(r[4] != 0 for r in lp.graph_fork_edges)


def stream_queue_columns(rank: np.ndarray, stream: np.ndarray, max_connections: int) -> np.ndarray:
    """Hardware queue of each op (rule hardware-queues): its rank's stream number (streams numbered by first
    appearance on the
    rank, in program order) mod ``max_connections``; ``rank``, ``stream`` int arrays of shape (n,) (stream: any
    code equal for equal names).

    The numbering runs in C (``_cwaves.rank_codes``; its numpy form is the test oracle
    ``tests/oracle/numpy_helpers.rank_codes``) on ranks in ascending order (a stable sort when they are not, as
    ``sim.replay``'s Op lists give) and dense codes (sparse or negative ones renumbered first).

    Raises
    ------
    BuildError
        The compiled module is not built (:func:`schedsim.lower.program.required`).
    """
    from schedsim.lower.program import required

    n = len(rank)
    if not n:
        return np.zeros(0, np.int64)
    rank, stream = np.asarray(rank, np.int64), np.asarray(stream, np.int64)  # int64 columns as they are (read only)
    if int(stream.min()) < 0 or int(stream.max()) >= 4 * n + 64:  # codes the C's table does not take: 0..k-1
        stream = unique_keys(stream)[2].astype(np.int64)
    codes = required("rank_codes")
    order = None if bool(np.all(rank[1:] >= rank[:-1])) else np.argsort(rank, kind="stable")
    num = np.empty(n, np.int64)
    if order is None:
        ok = codes(rank, stream, num)
    else:  # a rank's ops keep their program order
        got = np.empty(n, np.int64)
        ok = codes(rank[order], stream[order], got)
        num[order] = got
    if not ok:
        raise AssertionError("rank_codes declined ascending ranks with dense codes")
    if int(num.max()) < max_connections:  # every rank's streams fewer than the queues (numbers from 0): as they are
        return num
    return num % max_connections


def stream_queues(ops: Sequence[Op], max_connections: int) -> list[int]:
    """:func:`stream_queue_columns` of a list of ops."""
    codes: dict[str, int] = {}
    sid = np.fromiter((codes.setdefault(op.stream, len(codes)) for op in ops), np.int64, len(ops))
    rank = np.fromiter((op.rank for op in ops), np.int64, len(ops))
    return stream_queue_columns(rank, sid, max_connections).tolist()


def communicator(op: Op, world: int, p2p_serialized: bool, ranks: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The NCCL communicator (its ranks) an op runs on (rule communicator-order): a batched send/recv's is its
    process group's, ``ranks`` (:func:`schedsim.lower.p2p_comms.batch_communicators`; None: the world's)."""
    if op.kind in P2P_KINDS:
        if op.p2p_batch is not None:
            return tuple(range(world)) if ranks is None else ranks
        return op.group if op.group[0] < op.group[1] else (op.group[1], op.group[0])
    return op.group


def one_rank_res(kind: str) -> int:
    """Rule one-rank-collective: the job resource of a collective ``kind`` whose group has one rank: 0 (SMs, a
    same-device copy:
    :func:`kernel_ctas` times it as a memory-bound kernel) for the kinds the executor calls out of place, 4 (an
    empty item on the device-to-device copy engine) for the in-place ones (registry ``one_rank``).

    >>> one_rank_res("all_gather"), one_rank_res("all_reduce")
    (0, 4)
    """
    return 4 if KINDS[kind].one_rank == "nop" else 0


def link_ends(members: Sequence[Op], node: Sequence[int] | None = None) -> tuple[int, ...]:
    """Link directions one transfer uses (rule nccl-sms), as ``4·rank + 2·tier + d`` with d = 0 out, 1 in; tier 0 is the
    rank's scale-up link (NVLink, PCIe), tier 1 its NIC.

    ``members`` are the ops of one collective, or a send/recv pair ``(send, recv)``. ``node`` (rank -> node; None
    on a profile without a cluster topology, where every transfer is tier 0): a send/recv between two nodes uses
    the sender's NIC out and the receiver's NIC in; a collective whose ranks span nodes uses both tiers of every
    member (NCCL runs it hierarchically: its intra-node part on the scale-up links, the rest through the NICs);
    one inside a node tier 0. So an intra-node collective and a send between nodes do not share a link. A tier-1
    end stands for the rank's side of its NIC; how flows share the NICs themselves (GPUs on one NIC included)
    and leaf uplinks is :mod:`schedsim.network.share`'s, max-min fair.

    >>> from schedsim.graph.ops import Op
    >>> s = Op(name="s", rank=0, kind="send", stream="x", seq=0, deps=(), group=(0, 1), peer=1, nbytes=1.0)
    >>> r = Op(name="r", rank=1, kind="recv", stream="x", seq=0, deps=(), group=(0, 1), peer=0, nbytes=1.0)
    >>> link_ends([s, r])
    (0, 5)
    >>> link_ends([s, r], node=[0, 1])
    (2, 7)
    """
    if members and members[0].kind in P2P_KINDS:
        t = 2 if node is not None and node[members[0].rank] != node[members[-1].rank] else 0
        # (sender out, receiver in)
        return tuple(sorted(4 * op.rank + t + (not KINDS[op.kind].sender) for op in members))
    tiers = (0, 2) if node is not None and len({node[op.rank] for op in members}) > 1 else (0,)
    return tuple(4 * op.rank + t + d for op in members for t in tiers for d in (0, 1))
