"""Warp-specialised bf16 GEMM for Hopper (sm_90a) in CuTe DSL, instrumented with cute_prof.

    C[M, N] = A[M, K] @ B[N, K]^T        A, B: bf16, K-major (row-major)   C: bf16, row-major
                                          accumulation in fp32

Structure (one CTA = one 128 x 256 output tile, non-persistent, 384 threads; 2-CTA
clusters by default, see below):

* warpgroup 0 (warps 0..3) is the producer warpgroup. It gives registers back with
  ``setmaxnreg.dec``; only warp 0 works: per k-tile it waits for the stage to be empty,
  arms the stage's full barrier with the byte count, and issues two TMA loads (A and B
  tiles, 128x64 and 256x64) into a ``num_stages``-deep shared-memory ring.
* warpgroups 1 and 2 (warps 4..11) are consumers (``setmaxnreg.inc``). Each owns 64 rows
  of the tile: per k-tile it waits for the stage to be full, issues 4 wgmma
  (m64n256k16) on it, keeps one wgmma group in flight and releases the previous stage.
* epilogue: the two consumer warpgroups convert the fp32 accumulators to bf16, write
  128x32 sub-tiles to shared memory (stmatrix) and warp 4 TMA-stores them; the TMA store
  clips at the matrix edge, and TMA loads zero-fill past it, so any M and any N, K that
  are multiples of 8 (16-byte row pitch, a TMA requirement) work.

Pipeline: ``cutlass.pipeline.PipelineTmaAsync`` (full barrier = 1 producer arrive + TMA
transaction bytes; empty barrier = one arrive from lane 0 of each consumer warp).

Thread-block clusters (``GemmConfig.cluster_m`` x ``cluster_n``, default 2 x 1): the CTAs
of a cluster column (same N tile) share B, those of a cluster row share A. A shared tile
is loaded in slices: each CTA TMA-loads 1/cluster of it with ``.multicast::cluster`` into
the same stage of every CTA of its column/row, all signalling the full barrier of every
destination CTA (whose producer still arms it with the whole stage's byte count). A CTA
may only overwrite a stage of its peers once their consumers released it, so every
consumer warp arrives on the empty barrier of each CTA sharing its row or column (lane r
-> cluster rank r): the empty barrier counts ``8 * (cluster_m + cluster_n - 1)`` arrives.
Barrier init is followed by a cluster barrier; before exiting, the producer waits until
every stage is released again (no remote arrive can reach a CTA that has exited). The
grid is rounded up to whole clusters; CTAs past the edge of C load zero-filled tiles (and
their share of the peers' multicast), record like the others, and store nothing.
The launch is ``grid = (cluster_m * clusters, cluster_n, 1)``, clusters rasterised in
groups of ``group_m`` M-tiles like the 1 x 1 CTAs; 1 x 1 is the plain (non-cluster) launch.

Persistent variant (``GemmConfig(persistent=True)``, ``WsGemm.kernel_persistent``): the
grid is one CTA per SM in whole clusters (``persistent_ctas``, default the GPU's SM count;
fewer when there are fewer cluster tiles), and cluster c of the ``launched`` ones runs the
cluster work units c, c + launched, c + 2 * launched, ... (static round-robin, as CUTLASS's
Hopper persistent GEMMs schedule), each rasterised like the non-persistent grid. The smem
ring and the producer's and consumers' pipeline states carry from tile to tile: nothing is
drained between tiles, so the producer loads the next tile while the consumers finish the
last one's MMAs and epilogue; the epilogue's store pipeline also spans the tiles. Level-1
records come once per tile (mainloop payload = the cluster work index), level-2 per-k-tile
records carry ``payload = i * PERSISTENT_TILE_MODULO + k`` for the CTA's i-th tile
(``PERSISTENT_TILE_MODULO = 2**16``); :func:`expected_counts` gives ``tiles_per_cta``.

Profiling (``profile_level`` is a ``cutlass.Constexpr``; 0 compiles every probe out):

=====  ==========================================  =========================================
level  producer warp (slot 0)                      each consumer warp (slots 1..8)
=====  ==========================================  =========================================
1      ``ws.producer_mainloop`` x1                 ``ws.consumer_mainloop`` x1, ``ws.epilogue`` x1
2      + ``ws.wait_empty``, ``ws.tma_issue``        + ``ws.wait_full``, ``ws.mma_ktile``
       per k-tile                                  per k-tile
=====  ==========================================  =========================================

``tid = cta_linear * TID_STRIDE + slot`` (``cta_linear`` = cluster id * cluster size +
rank in the cluster, the launch order; ``blockIdx.x`` for 1 x 1; slot 0 = producer warp,
1..8 = consumer warps 4..11; every launched CTA records, cluster padding included);
per-k-tile records carry the k-tile index as payload, the epilogue ``pid_m * 65536 + pid_n``. See
:func:`expected_counts`. wgmma is asynchronous (one k-tile stays in flight), so a consumer
warp's "mma k-tile" k is the pipeline period of that k-tile: from the issue of its wgmma to
the issue of the next one (the last: until every wgmma retired). The "wait full" for stage
k+1 nests inside it and shows how much of the period the warp spent waiting for data. The
producer's "wait empty" / "issue TMA" regions tile its loop with no gaps.

Three write paths (``GemmConfig.recorder``): ``"staged"`` (default) keeps records in the
warp's registers with ``cute_prof.device.WarpRecorder`` and writes them with one atomic per
FLUSH_EVERY k-tiles; ``"direct"`` calls ``cute_prof.device.profile_stop(guard="lane0")``,
one global atomic per record; ``"slices"`` stores each region as two 8-byte words into the
warp's own slice (``SliceRecorder.span``: no atomic, no staging). :func:`alloc_prof_for`
allocates the buffer each path needs.

Run (GPU):  python -m examples.ws_gemm --mnk 1000,1032,520 --level 2 [--cluster-m 1]
            python bench/kernel_cost.py ws_gemm ; python examples/ws_gemm_profile.py
PTX (CPU):  CUTE_DSL_ARCH=sm_90a CUTE_DSL_KEEP=ptx CUTE_DSL_DUMP_DIR=/tmp/d
            python -m examples.ws_gemm --emit-ptx /tmp/d [--persistent]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Int32
try:
    from cutlass.tensor_utils import LayoutEnum
except ImportError:  # older DSL
    from cutlass.utils import LayoutEnum

try:
    from cutlass.memory import SmemAllocator as _SmemAllocator
except ImportError:  # older DSL
    from cutlass.utils import SmemAllocator as _SmemAllocator

# --------------------------------------------------------------------------------------
# profiling ops (device side)

import cute_prof.device as cp  # noqa: E402

PROF_OPS_SOURCE = "cute_prof.device"

# tag names (string names are given ids by cute_prof.tags.default_tag_table())
TAG_WAIT_EMPTY = "ws.wait_empty"
TAG_TMA_ISSUE = "ws.tma_issue"
TAG_WAIT_FULL = "ws.wait_full"
TAG_MMA_KTILE = "ws.mma_ktile"
TAG_EPILOGUE = "ws.epilogue"
TAG_PRODUCER_MAINLOOP = "ws.producer_mainloop"
TAG_CONSUMER_MAINLOOP = "ws.consumer_mainloop"
ALL_TAGS = (
    TAG_WAIT_EMPTY,
    TAG_TMA_ISSUE,
    TAG_WAIT_FULL,
    TAG_MMA_KTILE,
    TAG_EPILOGUE,
    TAG_PRODUCER_MAINLOOP,
    TAG_CONSUMER_MAINLOOP,
)

RECORDERS = cp.WRITE_PATHS
FLUSH_EVERY = 8  # staged recorder: flush after every 8 k-tiles (16 records < 32 lanes)

# tid = cta_linear * TID_STRIDE + slot; slot 0 = producer warp, 1 + i = consumer warp i
TID_STRIDE = 16
PRODUCER_SLOT = 0


def tid_of(cta_linear: int, slot: int) -> int:
    return cta_linear * TID_STRIDE + slot


def split_tid(tid):
    """(cta_linear, slot) of a tid (works on numpy arrays)."""
    return tid // TID_STRIDE, tid % TID_STRIDE


# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    tile_m: int = 128
    tile_n: int = 256
    tile_k: int = 64
    num_stages: Optional[int] = None  # None: as many as fit in shared memory (4 for 128x256)
    epi_stages: int = 4
    group_m: int = 8  # CTA rasterisation: groups of group_m M-tiles sweep N (L2 reuse)
    producer_regs: int = 40
    consumer_regs: int = 232
    # how records reach the buffer: "staged" = cute_prof.device.WarpRecorder (records kept in
    # the warp's registers, one atomic + coalesced stores per FLUSH_EVERY k-tiles), "direct"
    # = cute_prof.device.profile_stop(guard="lane0") (one atomic per record), or "slices" =
    # cute_prof.device.slices.SliceRecorder (two 8-byte stores per region into the warp's
    # own slice of a slices buffer: alloc_prof_for allocates it)
    recorder: str = "staged"
    # thread-block cluster (cluster_m x cluster_n CTAs). cluster_m > 1: the CTAs of a
    # cluster column share the B tile (each TMA-loads 1/cluster_m of it and multicasts it
    # to the others); cluster_n > 1: the CTAs of a cluster row share the A tile. 1 x 1 is
    # the plain non-cluster launch.
    cluster_m: int = 2
    cluster_n: int = 1
    # persistent kernel: one CTA per SM (whole clusters), each looping over output tiles
    # (static round-robin: cluster work index = launched cluster + i * clusters launched),
    # the smem ring and its pipeline states carried from tile to tile
    persistent: bool = False
    # flight recorder (non-persistent kernel, profile level >= 2): the device address of a
    # cute_prof.flight position region (pinned, mapped host memory) and its slot count, fixed
    # at compile time; the warps then also mark where they wait, for hang reports. 0: off.
    flight_address: int = 0
    flight_slots: int = 0
    # persistent only: at most this many CTAs (None: the SMs of the current GPU, 132 without one)
    persistent_ctas: Optional[int] = None


# persistent kernel, level 2: per-k-tile payload = tile_local_index * PERSISTENT_TILE_MODULO + k
# (tile_local_index = i, the CTA's i-th output tile; a power of two >= any k-tile count up
# to K = 4 M, so the host splits payload // modulo, payload % modulo without knowing K;
# ``examples/ws_gemm_persistent_pipeline.json`` carries it as "tile_modulo")
PERSISTENT_TILE_MODULO = 1 << 16


def _device_sms() -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(torch.cuda.current_device())
                       .multi_processor_count)
    except Exception:  # noqa: BLE001
        pass
    return 132  # H100 SXM


class WsGemm:
    """Host object: holds the static configuration; ``__call__`` is the ``@cute.jit`` entry.

    ``cute.compile(gemm, mA, mB, mC, prof_buf, max_events, stream, profile_level)``
    """

    def __init__(self, config: GemmConfig = GemmConfig()):
        self.cfg = config
        if config.tile_m != 128:
            raise ValueError("tile_m must be 128 (two consumer warpgroups of 64 rows)")
        if config.tile_n not in (128, 256):
            # (64 compiles, but ptxas then sizes the kernel at ~64 registers/thread and
            # setmaxnreg.inc 232 would ask for more than the CTA was launched with)
            raise ValueError("tile_n must be 128 or 256")
        if config.tile_k != 64:
            raise ValueError("tile_k must be 64 (one 128-byte swizzle atom of bf16)")
        if config.recorder not in RECORDERS:
            raise ValueError(f"recorder must be one of {RECORDERS}")
        if config.cluster_m not in (1, 2) or config.cluster_n not in (1, 2):
            raise ValueError("cluster_m and cluster_n must be 1 or 2")
        self.cluster_mn = (config.cluster_m, config.cluster_n)
        self.cluster_size = config.cluster_m * config.cluster_n
        # CTAs each CTA's consumers release a stage to: itself and every CTA that
        # multicasts into it (same cluster row or column)
        self.mcast_peers = config.cluster_m + config.cluster_n - 1
        self.tile_shape_mnk = (config.tile_m, config.tile_n, config.tile_k)
        self.num_consumer_wg = 2
        self.num_consumer_warps = 4 * self.num_consumer_wg
        self.threads_per_cta = 128 * (1 + self.num_consumer_wg)
        self.num_consumer_threads = 128 * self.num_consumer_wg
        self.producer_warp = 0
        self.first_consumer_warp = 4
        self.epi_store_warp = 4
        self.acc_dtype = cutlass.Float32
        self.ab_dtype = cutlass.BFloat16
        self.c_dtype = cutlass.BFloat16
        self.smem_capacity = 232448  # sm_90 opt-in maximum per CTA
        self.buffer_align_bytes = 1024
        self.epi_tile = (config.tile_m, min(32, config.tile_n))
        self.epi_stages = config.epi_stages
        ab_bytes = (config.tile_m + config.tile_n) * config.tile_k * 2
        epi_bytes = self.epi_tile[0] * self.epi_tile[1] * 2 * self.epi_stages
        max_stages = (self.smem_capacity - 1024 - epi_bytes) // ab_bytes
        self.num_stages = config.num_stages or min(max_stages, 8)
        if self.num_stages > max_stages or self.num_stages < 2:
            raise ValueError(f"num_stages={self.num_stages} does not fit (max {max_stages})")
        self.recording_slots = tuple(range(1, 1 + self.num_consumer_warps))
        self.launch_cluster = [config.cluster_m, config.cluster_n, 1] if self.cluster_size > 1 else None
        self.epilog_barrier = pipeline.NamedBarrier(
            barrier_id=1, num_threads=self.num_consumer_threads
        )
        self.persistent = bool(config.persistent)
        if self.persistent:
            ctas = config.persistent_ctas or _device_sms()
            # whole clusters only
            self.max_clusters = max(1, ctas // self.cluster_size)
            num_epi = (config.tile_m // self.epi_tile[0]) * (config.tile_n // self.epi_tile[1])
            if num_epi % self.epi_stages:
                # the epilogue's smem buffer index restarts at 0 with every tile
                raise ValueError("persistent: epi_stages must divide the epilogue sub-tiles")

    # ---------------------------------------------------------------- host-side facts
    def grid_shape(self, m: int, n: int) -> tuple[int, int]:
        """Output tiles along M and N (the CTAs that own part of C)."""
        return math.ceil(m / self.cfg.tile_m), math.ceil(n / self.cfg.tile_n)

    def padded_grid_shape(self, m: int, n: int) -> tuple[int, int]:
        """CTAs along M and N, rounded up to whole clusters. CTAs past the edge of C run
        the mainloop (their loads are zero-filled by TMA, and they must issue their share
        of the multicast loads of their cluster peers) and record like every other CTA,
        but store nothing."""
        gm, gn = self.grid_shape(m, n)
        cm, cn = self.cluster_mn
        return cm * math.ceil(gm / cm), cn * math.ceil(gn / cn)

    def num_ctas(self, m: int, n: int) -> int:
        """CTAs launched (cluster padding included): the CTAs that record."""
        if self.persistent:
            return self.launched_clusters(m, n) * self.cluster_size
        gm, gn = self.padded_grid_shape(m, n)
        return gm * gn

    def num_clusters(self, m: int, n: int) -> int:
        """Cluster work units (cluster-padded output tiles / cluster size)."""
        gm, gn = self.padded_grid_shape(m, n)
        return gm * gn // self.cluster_size

    def launched_clusters(self, m: int, n: int) -> int:
        """Persistent kernel: clusters launched (at most one CTA per SM)."""
        return min(self.num_clusters(m, n), self.max_clusters)

    def tiles_per_cta(self, m: int, n: int):
        """Output tiles each launched CTA runs, in tid (cta_linear) order: 1 each for the
        non-persistent kernel; the persistent scheduler gives cluster c the work units
        c, c + launched, c + 2 * launched, ..."""
        import numpy as np

        if not self.persistent:
            return np.ones(self.num_ctas(m, n), dtype=np.int64)
        total, launched = self.num_clusters(m, n), self.launched_clusters(m, n)
        per_cluster = (total - np.arange(launched) + launched - 1) // launched
        return np.repeat(per_cluster, self.cluster_size)

    def flight_positions(self):
        """RoleRecorder's ``flight=`` argument: the position region fixed at compile time, or None."""
        if self.cfg.flight_address == 0 or self.cfg.persistent:
            return None
        return (int(self.cfg.flight_address), int(self.cfg.flight_slots))

    def k_tiles(self, k: int) -> int:
        return math.ceil(k / self.cfg.tile_k)

    # ---------------------------------------------------------------- jit entry
    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        prof_buf: cute.Tensor,
        max_events: Int32,
        stream,
        profile_level: cutlass.Constexpr[int],
    ):
        a_layout = LayoutEnum.ROW_MAJOR  # K-major A
        b_layout = LayoutEnum.ROW_MAJOR  # K-major B (N x K)
        c_layout = LayoutEnum.ROW_MAJOR  # N-major C

        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            a_layout.sm90_mma_major_mode(),
            b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            (self.num_consumer_wg, 1, 1),
            tiler_mn=(64, self.tile_shape_mnk[1]),
        )

        a_smem_staged = sm90_utils.make_smem_layout_a(
            a_layout, self.tile_shape_mnk, self.ab_dtype, self.num_stages
        )
        b_smem_staged = sm90_utils.make_smem_layout_b(
            b_layout, self.tile_shape_mnk, self.ab_dtype, self.num_stages
        )
        epi_smem_staged = sm90_utils.make_smem_layout_epi(
            self.c_dtype, c_layout, self.epi_tile, self.epi_stages
        )

        a_smem_one = cute.slice_(a_smem_staged, (None, None, 0))
        b_smem_one = cute.slice_(b_smem_staged, (None, None, 0))
        epi_smem_one = cute.slice_(epi_smem_staged, (None, None, 0))

        # A is shared by the cluster_n CTAs of a cluster row, B by the cluster_m CTAs of a
        # cluster column: a shared operand is loaded by a multicast atom whose box is
        # 1/cluster of the tile (each CTA loads its slice into every CTA of the row/column)
        cm, cn = self.cluster_mn
        op_a = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        if cutlass.const_expr(cn > 1):
            op_a = cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()
        op_b = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        if cutlass.const_expr(cm > 1):
            op_b = cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()
        tma_atom_a, tma_a = cute.nvgpu.cpasync.make_tiled_tma_atom(
            op_a,
            mA,
            a_smem_one,
            (self.tile_shape_mnk[0], self.tile_shape_mnk[2]),
            num_multicast=cn,
        )
        tma_atom_b, tma_b = cute.nvgpu.cpasync.make_tiled_tma_atom(
            op_b,
            mB,
            b_smem_one,
            (self.tile_shape_mnk[1], self.tile_shape_mnk[2]),
            num_multicast=cm,
        )
        tma_atom_c, tma_c = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
            mC,
            epi_smem_one,
            self.epi_tile,
        )

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            sA: cute.struct.Align[
                cute.struct.MemRange[self.ab_dtype, cute.cosize(a_smem_staged)],
                self.buffer_align_bytes,
            ]
            sB: cute.struct.Align[
                cute.struct.MemRange[self.ab_dtype, cute.cosize(b_smem_staged)],
                self.buffer_align_bytes,
            ]
            sC: cute.struct.Align[
                cute.struct.MemRange[self.c_dtype, cute.cosize(epi_smem_staged)],
                self.buffer_align_bytes,
            ]

        self.shared_storage = SharedStorage

        m = cute.size(mC, mode=[0])
        n = cute.size(mC, mode=[1])
        num_m_tiles = (m + self.tile_shape_mnk[0] - 1) // self.tile_shape_mnk[0]
        num_n_tiles = (n + self.tile_shape_mnk[1] - 1) // self.tile_shape_mnk[1]
        num_m_clusters = (num_m_tiles + cm - 1) // cm
        num_n_clusters = (num_n_tiles + cn - 1) // cn

        if cutlass.const_expr(self.persistent):
            launched = cutlass.min(num_m_clusters * num_n_clusters, self.max_clusters)
            self.kernel_persistent(
                tma_atom_a,
                tma_a,
                tma_atom_b,
                tma_b,
                tma_atom_c,
                tma_c,
                tiled_mma,
                a_smem_staged,
                b_smem_staged,
                epi_smem_staged,
                num_m_tiles,
                num_n_tiles,
                num_m_clusters,
                num_n_clusters,
                prof_buf,
                max_events,
                profile_level,
            ).launch(
                grid=[launched * cm, cn, 1],
                block=[self.threads_per_cta, 1, 1],
                cluster=self.launch_cluster,
                stream=stream,
            )
        else:
            self.kernel(
                tma_atom_a,
                tma_a,
                tma_atom_b,
                tma_b,
                tma_atom_c,
                tma_c,
                tiled_mma,
                a_smem_staged,
                b_smem_staged,
                epi_smem_staged,
                num_m_tiles,
                num_n_tiles,
                num_m_clusters,
                num_n_clusters,
                prof_buf,
                max_events,
                profile_level,
            ).launch(
                # x: cluster_m CTAs per cluster, clusters in launch (rasterisation) order;
                # y: the cluster_n CTAs of a cluster row
                grid=[num_m_clusters * num_n_clusters * cm, cn, 1],
                block=[self.threads_per_cta, 1, 1],
                cluster=self.launch_cluster,
                stream=stream,
            )

    # ---------------------------------------------------------------- shared device pieces
    # (plain methods, traced inline into both kernels)
    def raster_groups(self, num_n_clusters):
        """(group_m, clusters per group): clusters are rasterised in groups of ``group_m``
        M-tiles that sweep N (L2 reuse)."""
        group_m = max(1, self.cfg.group_m // self.cluster_mn[0])  # in clusters (the same M rows as 1 x 1)
        return group_m, group_m * num_n_clusters

    def tile_of_cluster(self, cluster_id, groups, num_m_clusters, rank_m, rank_n):
        """(pid_m, pid_n) of a CTA: its cluster's place in the rasterisation (``groups`` from
        :meth:`raster_groups`), then the CTA's place in its cluster."""
        cm, cn = self.cluster_mn
        group_m, tiles_per_group = groups
        group_id = cluster_id // tiles_per_group
        first_m = group_id * group_m
        rows_in_group = cutlass.min(num_m_clusters - first_m, group_m)
        in_group = cluster_id % tiles_per_group
        pid_m = (first_m + in_group % rows_in_group) * cm + rank_m
        pid_n = (in_group // rows_in_group) * cn + rank_n
        return pid_m, pid_n

    def make_ab_pipeline(self, storage, stage_bytes):
        """The A/B ring's mbarrier pipeline (see the comment at the call in ``kernel``)."""
        cm, cn = self.cluster_mn
        return pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar.data_ptr(),
            num_stages=self.num_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, self.num_consumer_warps * self.mcast_peers
            ),
            tx_count=stage_bytes,
            cta_layout_vmnk=cute.make_layout((1, cm, cn, 1)),
        )

    def epilogue_copies(self, tiled_mma, sC, ctidx, acc):
        """The epilogue's register -> smem copy (stmatrix) of this consumer thread:
        (tiled copy, smem sub-tile ring, accumulator view, fp32 and bf16 staging registers,
        their size)."""
        copy_atom_r2s = sm90_utils.get_smem_store_op(
            LayoutEnum.ROW_MAJOR, elem_ty_d=self.c_dtype, elem_ty_acc=self.acc_dtype
        )
        copy_atom_c = cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.c_dtype
        )
        tiled_copy_c_atom = cute.make_tiled_copy_C_atom(copy_atom_c, tiled_mma)
        tiled_copy_r2s = cute.make_tiled_copy_S(copy_atom_r2s, tiled_copy_c_atom)
        thr_copy_r2s = tiled_copy_r2s.get_slice(ctidx)
        tRS_sD = thr_copy_r2s.partition_D(sC)  # (R2S, R2S_M, R2S_N, EPI_STAGE)
        tRS_rAcc = tiled_copy_r2s.retile(acc)
        rD_shape = cute.shape(thr_copy_r2s.partition_S(sC))
        tRS_rD = cute.make_rmem_tensor(rD_shape[:3], self.acc_dtype)
        tRS_rD_out = cute.make_rmem_tensor(rD_shape[:3], self.c_dtype)
        return tiled_copy_r2s, tRS_sD, tRS_rAcc, tRS_rD, tRS_rD_out, cute.size(tRS_rD)

    def make_store_pipe(self):
        return pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stages,
            producer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, self.num_consumer_threads
            ),
        )

    def load_stage(self, ab_pipe, state, tma_atom_a, tAgA, a_coord, tAsA, tma_atom_b, tBgB, b_coord,
                   tBsB, a_mcast_mask, b_mcast_mask):
        """Arm the stage's full barrier with its byte count, then TMA-load its A and B tiles
        (global tiles ``tAgA[a_coord]``, ``tBgB[b_coord]``), each multicast to the CTAs of the
        cluster row (A) / column (B) that share it."""
        cm, cn = self.cluster_mn
        ab_pipe.sync_object_full.arrive(state.index, ab_pipe.producer_mask)
        full_bar = ab_pipe.producer_get_barrier(state)
        if cutlass.const_expr(cn > 1):
            cute.copy(tma_atom_a, tAgA[a_coord], tAsA[(None, state.index)], tma_bar_ptr=full_bar,
                      mcast_mask=a_mcast_mask)
        else:
            cute.copy(tma_atom_a, tAgA[a_coord], tAsA[(None, state.index)], tma_bar_ptr=full_bar)
        if cutlass.const_expr(cm > 1):
            cute.copy(tma_atom_b, tBgB[b_coord], tBsB[(None, state.index)], tma_bar_ptr=full_bar,
                      mcast_mask=b_mcast_mask)
        else:
            cute.copy(tma_atom_b, tBgB[b_coord], tBsB[(None, state.index)], tma_bar_ptr=full_bar)

    def prefetch_prof_header(self, prof_buf, profile_level):
        """Slices path: the recorders' header loads, issued before the pipeline set-up (its
        barrier init and cluster sync) so that they land before any warp opens its slice.
        None on the other paths."""
        if profile_level >= 1 and self.cfg.recorder == "slices":
            return cp.prefetch_header(prof_buf)
        return None

    def cta_place(self, bidx):
        """The CTA's place in its cluster and its cluster's in launch order: (the cluster's
        CTA layout, the CTA's coordinate in it (None for 1 x 1), rank_m, rank_n, the
        cluster's index, the CTA's linear index: whole clusters in launch order, for the
        records' tids). 1 x 1: rank 0 and cluster index = blockIdx.x."""
        cm, cn = self.cluster_mn
        cta_layout_mnk = cute.make_layout((cm, cn, 1))
        if self.cluster_size == 1:
            return cta_layout_mnk, None, 0, 0, bidx, bidx
        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord = cta_layout_mnk.get_flat_coord(cta_rank)
        cluster = bidx // cm
        return (cta_layout_mnk, cluster_coord, cluster_coord[0], cluster_coord[1], cluster,
                cluster * self.cluster_size + cta_rank)

    def stage_buffers(self, a_smem_staged, b_smem_staged, epi_smem_staged, prof_buf,
                      profile_level):
        """Shared memory, the recorders' header loads (``prefetch_prof_header``), the A/B
        ring's pipeline (see the comment at the call in ``kernel``) and the staged A, B and
        C tiles: (ab_pipe, prof_header, sA, sB, sC)."""
        smem = _SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        a_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(a_smem_staged, (None, None, 0)))
        b_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(b_smem_staged, (None, None, 0)))
        prof_header = self.prefetch_prof_header(prof_buf, profile_level)
        ab_pipe = self.make_ab_pipeline(storage, a_bytes + b_bytes)
        sA = storage.sA.get_tensor(a_smem_staged.outer, swizzle=a_smem_staged.inner)
        sB = storage.sB.get_tensor(b_smem_staged.outer, swizzle=b_smem_staged.inner)
        sC = storage.sC.get_tensor(epi_smem_staged.outer, swizzle=epi_smem_staged.inner)
        return ab_pipe, prof_header, sA, sB, sC

    def issue_mma(self, tiled_mma, acc, tCrA, tCrB, stage, num_k_blocks):
        """One k-tile's wgmma from smem stage ``stage``, committed as one group: it runs on
        while the warp goes on (``warpgroup.wait_group`` waits for it)."""
        cute.nvgpu.warpgroup.fence()
        for kb in range(num_k_blocks):  # unrolled while tracing (a plain method)
            coord = (None, None, kb, stage)
            cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
        cute.nvgpu.warpgroup.commit_group()

    @cute.jit
    def store_tile(self, copies, tma_atom_c, sC, gC, store_pipe, warp_idx, tile_valid):
        """Convert the accumulators to bf16 and TMA-store the 128 x 256 tile ``gC`` in
        128 x 32 sub-tiles through the ``epi_stages``-deep smem ring (``tile_valid``: False
        for a cluster-padding CTA past the edge of C, which stores nothing)."""
        tiled_copy_r2s, tRS_sD, tRS_rAcc, tRS_rD, tRS_rD_out, size_rD = copies
        gC_epi = cute.zipped_divide(gC, self.epi_tile)  # ((EM, EN), (RM, RN))
        bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(
            tma_atom_c,
            0,
            cute.make_layout(1),
            cute.group_modes(sC, 0, 2),
            gC_epi,
        )
        epi_rest = gC_epi.shape[1]
        num_epi = cute.size(epi_rest)
        epi_order = cute.make_layout(epi_rest, stride=(epi_rest[1], 1))
        for e in cutlass.range_constexpr(num_epi):
            for v in cutlass.range_constexpr(size_rD):
                tRS_rD[v] = tRS_rAcc[e * size_rD + v]
            tRS_rD_out.store(tRS_rD.load().to(self.c_dtype))
            buf_idx = e % self.epi_stages
            cute.copy(tiled_copy_r2s, tRS_rD_out, tRS_sD[(None, None, None, buf_idx)])
            # make the generic-proxy smem writes visible to the TMA (async proxy)
            cute.arch.fence_proxy("async.shared", space="cta")
            self.epilog_barrier.arrive_and_wait()
            if warp_idx == self.epi_store_warp:
                if cutlass.const_expr(self.cluster_size > 1):
                    # cluster padding: a CTA past the edge of C stores nothing
                    if tile_valid:
                        cute.copy(
                            tma_atom_c,
                            bSG_sD[(None, buf_idx)],
                            bSG_gD[(None, epi_order.get_hier_coord(e))],
                        )
                else:
                    cute.copy(
                        tma_atom_c,
                        bSG_sD[(None, buf_idx)],
                        bSG_gD[(None, epi_order.get_hier_coord(e))],
                    )
                store_pipe.producer_commit()
                store_pipe.producer_acquire()
            self.epilog_barrier.arrive_and_wait()

    # ---------------------------------------------------------------- device kernel
    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem_staged: cute.ComposedLayout,
        b_smem_staged: cute.ComposedLayout,
        epi_smem_staged: cute.ComposedLayout,
        num_m_tiles: Int32,
        num_n_tiles: Int32,
        num_m_clusters: Int32,
        num_n_clusters: Int32,
        prof_buf: cute.Tensor,
        max_events: Int32,
        profile_level: cutlass.Constexpr[int],
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

        if warp_idx == self.producer_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_c)

        # ---- grouped rasterisation over clusters: cluster id -> (cl_m, cl_n), then the
        # CTA's place in its cluster -> (pid_m, pid_n). 1 x 1: cluster id = blockIdx.x.
        cm, cn = self.cluster_mn
        cta_layout_mnk, cluster_coord, rank_m, rank_n, cluster_id, cta_linear = \
            self.cta_place(bidx)
        pid_m, pid_n = self.tile_of_cluster(cluster_id, self.raster_groups(num_n_clusters),
                                            num_m_clusters, rank_m, rank_n)

        # ---- shared memory and the mainloop pipeline
        # full barrier: 1 arrive (the local producer's expect_tx of the whole stage,
        # a_bytes + b_bytes, whichever CTA's TMA writes them); empty barrier: lane 0 of
        # every consumer warp of this CTA and of each CTA that multicasts into it (same
        # cluster row or column) arrives: num_consumer_warps * (cluster_m + cluster_n - 1).
        # PipelineTmaAsync picks the signalling lanes (lane r arrives on cluster rank r when
        # r shares a row or column with this CTA) and, for a cluster, ends with
        # fence.mbarrier_init + a cluster barrier so no peer arrives before init.
        ab_pipe, prof_header, sA, sB, sC = self.stage_buffers(
            a_smem_staged, b_smem_staged, epi_smem_staged, prof_buf, profile_level)

        # (bM, bK, k_tiles), (bN, bK, k_tiles), (bM, bN)
        gA = cute.local_tile(
            mA, (self.tile_shape_mnk[0], self.tile_shape_mnk[2]), (pid_m, None)
        )
        gB = cute.local_tile(
            mB, (self.tile_shape_mnk[1], self.tile_shape_mnk[2]), (pid_n, None)
        )
        gC = cute.local_tile(
            mC, (self.tile_shape_mnk[0], self.tile_shape_mnk[1]), (pid_m, pid_n)
        )
        k_tiles = cute.size(gA, mode=[2])

        # ================================================================ producer
        if warp_idx < self.first_consumer_warp:
            cute.arch.setmaxregister_decrease(self.cfg.producer_regs)
            if warp_idx == self.producer_warp:
                # each CTA loads slice rank_n (of cn) of A and slice rank_m (of cm) of B
                tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                    tma_atom_a,
                    rank_n,
                    cute.make_layout(cn),
                    cute.group_modes(sA, 0, 2),
                    cute.group_modes(gA, 0, 2),
                )
                tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                    tma_atom_b,
                    rank_m,
                    cute.make_layout(cm),
                    cute.group_modes(sB, 0, 2),
                    cute.group_modes(gB, 0, 2),
                )
                a_mcast_mask = b_mcast_mask = None  # 1 x 1: no multicast
                if cutlass.const_expr(self.cluster_size > 1):
                    # multicast to the CTAs of this cluster row (A) / column (B)
                    a_mcast_mask = cute.make_layout_image_mask(
                        cta_layout_mnk, cluster_coord, mode=1
                    )
                    b_mcast_mask = cute.make_layout_image_mask(
                        cta_layout_mnk, cluster_coord, mode=0
                    )
                prod_tid = cta_linear * TID_STRIDE + PRODUCER_SLOT
                if cutlass.const_expr(profile_level >= 1):
                    probe = cp.RoleRecorder(prof_buf, max_events, prod_tid, write_path=self.cfg.recorder,
                                            flight=self.flight_positions(), header=prof_header)
                    probe.enter(TAG_PRODUCER_MAINLOOP, depth=0)
                    t_main = probe.start()
                    t_a = t_main  # start of the next "wait empty" region

                state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.num_stages
                )
                for k in cutlass.range(k_tiles, unroll=1):
                    # wait until every consumer warp released this stage
                    if cutlass.const_expr(profile_level >= 2):
                        probe.enter(TAG_WAIT_EMPTY, payload=k, depth=1)
                    ab_pipe.sync_object_empty.wait(state.index, state.phase)
                    if cutlass.const_expr(profile_level >= 2):
                        probe.leave(depth=1)
                        t_b = probe.start()
                    self.load_stage(ab_pipe, state, tma_atom_a, tAgA, (None, k), tAsA,
                                    tma_atom_b, tBgB, (None, k), tBsB, a_mcast_mask, b_mcast_mask)
                    state.advance()
                    if cutlass.const_expr(profile_level >= 2):
                        # the records are stored after the loads are issued, off the path
                        # that feeds the consumers; "issue TMA" ends where the next wait starts
                        probe.stop(t_a, TAG_WAIT_EMPTY, payload=k, end=t_b)
                        t_a = probe.start()
                        probe.stop(t_b, TAG_TMA_ISSUE, payload=k, end=t_a)
                        if cutlass.const_expr(self.cfg.recorder == "staged"):
                            if k % FLUSH_EVERY == FLUSH_EVERY - 1:
                                probe.flush()

                if cutlass.const_expr(profile_level >= 1):
                    probe.stop(t_main, TAG_PRODUCER_MAINLOOP, payload=k_tiles)
                    probe.leave(depth=0)
                    probe.flush()

                if cutlass.const_expr(self.cluster_size > 1):
                    # producer tail (not profiled): wait until every stage has been
                    # released by all consumers that arrive on this CTA's empty barriers,
                    # peers included, so no remote arrive targets this CTA's shared memory
                    # after it exits
                    for _ in cutlass.range_constexpr(self.num_stages):
                        ab_pipe.sync_object_empty.wait(state.index, state.phase)
                        state.advance()

        # ================================================================ consumers
        if warp_idx >= self.first_consumer_warp:
            cute.arch.setmaxregister_increase(self.cfg.consumer_regs)
            ctidx = tidx - 128  # thread index among the consumer threads
            cons_wg = warp_idx // 4 - 1
            cons_tid = cta_linear * TID_STRIDE + 1 + (warp_idx - self.first_consumer_warp)

            thr_mma = tiled_mma.get_slice(cons_wg * 128)
            tCsA = thr_mma.partition_A(sA)
            tCsB = thr_mma.partition_B(sB)
            tCrA = tiled_mma.make_fragment_A(tCsA)
            tCrB = tiled_mma.make_fragment_B(tCsB)
            tCgC = thr_mma.partition_C(gC)
            acc = cute.make_rmem_tensor(tCgC.shape, self.acc_dtype)
            num_k_blocks = cute.size(tCrA, mode=[2])

            if cutlass.const_expr(profile_level >= 1):
                probe = cp.RoleRecorder(prof_buf, max_events, cons_tid, write_path=self.cfg.recorder,
                                        flight=self.flight_positions(), header=prof_header)
                probe.enter(TAG_CONSUMER_MAINLOOP, depth=0)
                t_main = probe.start()
                t_issue = t_main  # when the previous k-tile's wgmma was issued

            acc.fill(0.0)
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            read_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.num_stages
            )
            release_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.num_stages
            )
            for k in cutlass.range(k_tiles, unroll=1):
                if cutlass.const_expr(profile_level >= 2):
                    probe.enter(TAG_WAIT_FULL, payload=k, depth=1)
                    t_w = probe.start()
                ab_pipe.consumer_wait(read_state)
                if cutlass.const_expr(profile_level >= 2):
                    probe.leave(depth=1)
                    t_m = probe.start()
                self.issue_mma(tiled_mma, acc, tCrA, tCrB, read_state.index, num_k_blocks)
                if cutlass.const_expr(profile_level >= 2):
                    # stored after this k-tile's wgmma is issued, so the tensor cores never
                    # wait on a record. wgmma is asynchronous: k-tile k-1's "mma" period
                    # runs from its issue to this issue; the "wait full" nests inside it
                    probe.stop(t_w, TAG_WAIT_FULL, payload=k, end=t_m)
                    if k > 0:
                        probe.stop(t_issue, TAG_MMA_KTILE, payload=k - 1, end=t_m)
                    t_issue = t_m
                    if cutlass.const_expr(self.cfg.recorder == "staged"):
                        # the flush's stall lands while this k-tile's wgmma runs
                        if k % FLUSH_EVERY == FLUSH_EVERY - 1:
                            probe.flush()
                # keep this k-tile's wgmma in flight; the previous one is now complete
                cute.nvgpu.warpgroup.wait_group(1)
                if k > 0:
                    ab_pipe.consumer_release(release_state)
                    release_state.advance()
                read_state.advance()
            cute.nvgpu.warpgroup.wait_group(0)
            ab_pipe.consumer_release(release_state)
            if cutlass.const_expr(profile_level >= 2):
                # the last k-tile's period ends when every wgmma has retired
                t_done = probe.start()
                probe.stop(t_issue, TAG_MMA_KTILE, payload=k_tiles - 1, end=t_done)

            if cutlass.const_expr(profile_level >= 1):
                t_epi = probe.start()
                probe.stop(t_main, TAG_CONSUMER_MAINLOOP, payload=k_tiles)
                probe.leave(depth=0)

            # ------------------------------------------------------------ epilogue
            copies = self.epilogue_copies(tiled_mma, sC, ctidx, acc)
            tile_valid = None
            if cutlass.const_expr(self.cluster_size > 1):
                tile_valid = (pid_m < num_m_tiles) & (pid_n < num_n_tiles)
            store_pipe = self.make_store_pipe()
            self.store_tile(copies, tma_atom_c, sC, gC, store_pipe, warp_idx, tile_valid)
            if warp_idx == self.epi_store_warp:
                store_pipe.producer_tail()

            if cutlass.const_expr(profile_level >= 1):
                probe.stop(t_epi, TAG_EPILOGUE, payload=pid_m * 65536 + pid_n)
                probe.flush()

    # ---------------------------------------------------------------- persistent kernel
    @cute.kernel
    def kernel_persistent(
        self,
        tma_atom_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem_staged: cute.ComposedLayout,
        b_smem_staged: cute.ComposedLayout,
        epi_smem_staged: cute.ComposedLayout,
        num_m_tiles: Int32,
        num_n_tiles: Int32,
        num_m_clusters: Int32,
        num_n_clusters: Int32,
        prof_buf: cute.Tensor,
        max_events: Int32,
        profile_level: cutlass.Constexpr[int],
    ):
        """One CTA per SM (whole clusters). Cluster c of the ``launched`` ones runs the
        cluster work units c, c + launched, ... (static round-robin, the schedule of
        CUTLASS's Hopper persistent GEMMs), each rasterised like the non-persistent grid.
        The producer and consumers keep their pipeline states across tiles: the producer
        loads the next tile's first stages while the consumers finish the previous tile's
        MMAs and epilogue."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdimx, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

        if warp_idx == self.producer_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_c)

        cm, cn = self.cluster_mn
        cta_layout_mnk, cluster_coord, rank_m, rank_n, first_cluster, cta_linear = \
            self.cta_place(bidx)
        launched = gdimx
        if cutlass.const_expr(self.cluster_size > 1):
            launched = gdimx // cm
        total_clusters = num_m_clusters * num_n_clusters
        my_tiles = (total_clusters - first_cluster + launched - 1) // launched
        groups = self.raster_groups(num_n_clusters)

        # ---- shared memory and the mainloop pipeline (as the non-persistent kernel)
        ab_pipe, prof_header, sA, sB, sC = self.stage_buffers(
            a_smem_staged, b_smem_staged, epi_smem_staged, prof_buf, profile_level)

        # every tile of the matrices: (bM, bK, m_tiles, k_tiles), (bN, bK, n_tiles, k_tiles),
        # (bM, bN, m_tiles, n_tiles); a tile's slice is taken inside the tile loop
        gA_all = cute.local_tile(
            mA, (self.tile_shape_mnk[0], self.tile_shape_mnk[2]), (None, None)
        )
        gB_all = cute.local_tile(
            mB, (self.tile_shape_mnk[1], self.tile_shape_mnk[2]), (None, None)
        )
        gC_all = cute.local_tile(
            mC, (self.tile_shape_mnk[0], self.tile_shape_mnk[1]), (None, None)
        )
        k_tiles = cute.size(gA_all, mode=[3])

        # ================================================================ producer
        if warp_idx < self.first_consumer_warp:
            cute.arch.setmaxregister_decrease(self.cfg.producer_regs)
            if warp_idx == self.producer_warp:
                tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                    tma_atom_a,
                    rank_n,
                    cute.make_layout(cn),
                    cute.group_modes(sA, 0, 2),
                    cute.group_modes(gA_all, 0, 2),
                )
                tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                    tma_atom_b,
                    rank_m,
                    cute.make_layout(cm),
                    cute.group_modes(sB, 0, 2),
                    cute.group_modes(gB_all, 0, 2),
                )
                a_mcast_mask = b_mcast_mask = None  # 1 x 1: no multicast
                if cutlass.const_expr(self.cluster_size > 1):
                    a_mcast_mask = cute.make_layout_image_mask(
                        cta_layout_mnk, cluster_coord, mode=1
                    )
                    b_mcast_mask = cute.make_layout_image_mask(
                        cta_layout_mnk, cluster_coord, mode=0
                    )
                prod_tid = cta_linear * TID_STRIDE + PRODUCER_SLOT
                if cutlass.const_expr(profile_level >= 1):
                    # the producer warp runs whole (a warp-uniform role branch) on 40
                    # registers: no divergence check, which would spill here
                    probe = cp.RoleRecorder(prof_buf, max_events, prod_tid, write_path=self.cfg.recorder,
                                            converged=True, header=prof_header)

                state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.num_stages
                )
                for i in cutlass.range(my_tiles, unroll=1):
                    work = first_cluster + i * launched
                    pid_m, pid_n = self.tile_of_cluster(work, groups, num_m_clusters, rank_m, rank_n)
                    if cutlass.const_expr(profile_level >= 1):
                        t_main = probe.start()
                        t_a = t_main
                    for k in cutlass.range(k_tiles, unroll=1):
                        ab_pipe.sync_object_empty.wait(state.index, state.phase)
                        if cutlass.const_expr(profile_level >= 2):
                            t_b = probe.start()
                        self.load_stage(ab_pipe, state, tma_atom_a, tAgA, (None, pid_m, k), tAsA,
                                        tma_atom_b, tBgB, (None, pid_n, k), tBsB, a_mcast_mask, b_mcast_mask)
                        state.advance()
                        if cutlass.const_expr(profile_level >= 2):
                            # stored after the loads are issued (as in the kernel above)
                            probe.stop(t_a, TAG_WAIT_EMPTY,
                                       payload=i * PERSISTENT_TILE_MODULO + k, end=t_b)
                            t_a = probe.start()
                            probe.stop(t_b, TAG_TMA_ISSUE,
                                       payload=i * PERSISTENT_TILE_MODULO + k, end=t_a)
                            if cutlass.const_expr(self.cfg.recorder == "staged"):
                                if k % FLUSH_EVERY == FLUSH_EVERY - 1:
                                    probe.flush()
                    if cutlass.const_expr(profile_level >= 1):
                        # per tile; payload: the cluster work index of the tile
                        probe.stop(t_main, TAG_PRODUCER_MAINLOOP, payload=work)
                if cutlass.const_expr(profile_level >= 1):
                    probe.flush()

                if cutlass.const_expr(self.cluster_size > 1):
                    # producer tail: every stage released by all consumers (peers included)
                    for _ in cutlass.range_constexpr(self.num_stages):
                        ab_pipe.sync_object_empty.wait(state.index, state.phase)
                        state.advance()

        # ================================================================ consumers
        if warp_idx >= self.first_consumer_warp:
            cute.arch.setmaxregister_increase(self.cfg.consumer_regs)
            ctidx = tidx - 128
            cons_wg = warp_idx // 4 - 1
            cons_tid = cta_linear * TID_STRIDE + 1 + (warp_idx - self.first_consumer_warp)

            thr_mma = tiled_mma.get_slice(cons_wg * 128)
            tCsA = thr_mma.partition_A(sA)
            tCsB = thr_mma.partition_B(sB)
            tCrA = tiled_mma.make_fragment_A(tCsA)
            tCrB = tiled_mma.make_fragment_B(tCsB)
            tCgC = thr_mma.partition_C(gC_all[(None, None, 0, 0)])
            acc = cute.make_rmem_tensor(tCgC.shape, self.acc_dtype)
            num_k_blocks = cute.size(tCrA, mode=[2])
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)

            # epilogue pieces that do not depend on the tile; the store pipeline spans tiles
            copies = self.epilogue_copies(tiled_mma, sC, ctidx, acc)
            store_pipe = self.make_store_pipe()

            if cutlass.const_expr(profile_level >= 1):
                probe = cp.RoleRecorder(prof_buf, max_events, cons_tid, write_path=self.cfg.recorder,
                                        header=prof_header)

            read_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.num_stages
            )
            release_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.num_stages
            )
            for i in cutlass.range(my_tiles, unroll=1):
                work = first_cluster + i * launched
                pid_m, pid_n = self.tile_of_cluster(work, groups, num_m_clusters, rank_m, rank_n)
                base = i * PERSISTENT_TILE_MODULO
                if cutlass.const_expr(profile_level >= 1):
                    t_main = probe.start()
                    t_issue = t_main

                acc.fill(0.0)
                for k in cutlass.range(k_tiles, unroll=1):
                    if cutlass.const_expr(profile_level >= 2):
                        t_w = probe.start()
                    ab_pipe.consumer_wait(read_state)
                    if cutlass.const_expr(profile_level >= 2):
                        t_m = probe.start()
                    self.issue_mma(tiled_mma, acc, tCrA, tCrB, read_state.index, num_k_blocks)
                    if cutlass.const_expr(profile_level >= 2):
                        # stored after the wgmma is issued (as in the kernel above)
                        probe.stop(t_w, TAG_WAIT_FULL, payload=base + k, end=t_m)
                        if k > 0:
                            probe.stop(t_issue, TAG_MMA_KTILE, payload=base + k - 1, end=t_m)
                        t_issue = t_m
                        if cutlass.const_expr(self.cfg.recorder == "staged"):
                            if k % FLUSH_EVERY == FLUSH_EVERY - 1:
                                probe.flush()
                    cute.nvgpu.warpgroup.wait_group(1)
                    if k > 0:
                        ab_pipe.consumer_release(release_state)
                        release_state.advance()
                    read_state.advance()
                cute.nvgpu.warpgroup.wait_group(0)
                ab_pipe.consumer_release(release_state)
                release_state.advance()
                if cutlass.const_expr(profile_level >= 2):
                    t_done = probe.start()
                    probe.stop(t_issue, TAG_MMA_KTILE, payload=base + k_tiles - 1, end=t_done)
                if cutlass.const_expr(profile_level >= 1):
                    t_epi = probe.start()
                    probe.stop(t_main, TAG_CONSUMER_MAINLOOP, payload=work)

                # -------------------------------------------------------- epilogue
                gC = gC_all[(None, None, pid_m, pid_n)]
                tile_valid = None
                if cutlass.const_expr(self.cluster_size > 1):
                    tile_valid = (pid_m < num_m_tiles) & (pid_n < num_n_tiles)
                self.store_tile(copies, tma_atom_c, sC, gC, store_pipe, warp_idx, tile_valid)
                if cutlass.const_expr(profile_level >= 1):
                    probe.stop(t_epi, TAG_EPILOGUE, payload=pid_m * 65536 + pid_n)

            if warp_idx == self.epi_store_warp:
                store_pipe.producer_tail()
            if cutlass.const_expr(profile_level >= 1):
                probe.flush()


# ======================================================================================
# host helpers


def expected_counts(gemm: WsGemm, m: int, n: int, k: int, profile_level: int) -> dict:
    """Records per warp and in total for one launch (every launched CTA records, the
    cluster padding included: ``gemm.num_ctas``).

    Returns ``{"per_producer_warp": {tag: count}, "per_consumer_warp": {tag: count},
    "producers": int, "consumer_warps": int, "tiles_per_cta": array, "total": int}``; the
    per-warp counts are per output tile (a persistent CTA records them for each of its
    ``tiles_per_cta`` tiles, the others for their one tile)."""
    kt = gemm.k_tiles(k)
    ctas = gemm.num_ctas(m, n)
    tiles = gemm.tiles_per_cta(m, n)  # the counts below are per tile
    prod, cons = {}, {}
    if profile_level >= 1:
        prod[TAG_PRODUCER_MAINLOOP] = 1
        cons[TAG_CONSUMER_MAINLOOP] = 1
        cons[TAG_EPILOGUE] = 1
    if profile_level >= 2:
        prod[TAG_WAIT_EMPTY] = kt
        prod[TAG_TMA_ISSUE] = kt
        cons[TAG_WAIT_FULL] = kt
        cons[TAG_MMA_KTILE] = kt
    cw = ctas * len(gemm.recording_slots)
    n_tiles = int(tiles.sum())
    total = n_tiles * (sum(prod.values()) + len(gemm.recording_slots) * sum(cons.values()))
    return {
        "per_producer_warp": prod,
        "per_consumer_warp": cons,
        "producers": ctas,
        "consumer_warps": cw,
        "tiles_per_cta": tiles,
        "total": total,
    }


def _cute_tensor(t, *, leading_dim: int = 1, align: int = 16):
    from cutlass.cute.runtime import from_dlpack

    return from_dlpack(t, assumed_align=align).mark_layout_dynamic(leading_dim=leading_dim)


def _cute_prof_buffer(buf_tensor):
    from cutlass.cute.runtime import from_dlpack

    return from_dlpack(buf_tensor, assumed_align=8).mark_layout_dynamic()


def default_stream():
    """A CUstream for cute.compile / the launch: the current torch stream when CUDA is
    there, a fake stream otherwise (compile-only)."""
    try:
        import torch

        if torch.cuda.is_available():
            import cuda.bindings.driver as cuda

            return cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    except Exception:  # noqa: BLE001
        pass
    from cutlass.cute.runtime import make_fake_stream

    return make_fake_stream()


class CompiledWsGemm:
    """Compiles once per profile level (shapes are dynamic) and launches on torch tensors."""

    def __init__(self, config: GemmConfig = GemmConfig()):
        self.gemm = WsGemm(config)
        self._compiled = {}

    def compile(self, a, b, c, prof_tensor, profile_level: int, stream=None):
        key = int(profile_level)
        if key not in self._compiled:
            stream = default_stream() if stream is None else stream
            self._compiled[key] = cute.compile(
                self.gemm,
                _cute_tensor(a),
                _cute_tensor(b),
                _cute_tensor(c),
                _cute_prof_buffer(prof_tensor),
                Int32(max(0, (prof_tensor.numel() - 1) // 4)),
                stream,
                key,
            )
        return self._compiled[key]

    def prepare(self, a, b, c, prof_tensor, max_events: int, profile_level: int, stream=None):
        """Returns a zero-argument callable that launches the kernel (cute tensors are built
        once, so repeated launches cost no host-side conversion)."""
        _check_args(a, b, c)
        stream = default_stream() if stream is None else stream
        fn = self.compile(a, b, c, prof_tensor, profile_level, stream)
        args = (
            _cute_tensor(a),
            _cute_tensor(b),
            _cute_tensor(c),
            _cute_prof_buffer(prof_tensor),
            Int32(max_events),
        )

        def launch():
            fn(*args, stream)

        return launch

    def __call__(self, a, b, c=None, prof_tensor=None, max_events: int = 0, profile_level: int = 0):
        import torch

        if c is None:
            c = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)
        if prof_tensor is None:
            prof_tensor = _dummy_prof(a.device)
            max_events = 0
        self.prepare(a, b, c, prof_tensor, max_events, profile_level)()
        return c


def alloc_prof(max_events: int, device="cuda"):
    """A zeroed profile buffer tensor for ``max_events`` records (cute_prof's allocator:
    records 16-byte aligned, so the device uses vector stores)."""
    try:
        from cute_prof.buffer import allocate_profile_buffer

        return allocate_profile_buffer(max(1, int(max_events)), device=device).tensor
    except ImportError:
        import torch

        return torch.zeros(1 + 4 * max(1, int(max_events)), dtype=torch.int64, device=device)


def words_per_region(gemm: WsGemm) -> int:
    """Buffer records one region takes (what a trace's ``attempted`` counts): one on the flat
    paths, two slice words (START and SPAN) on the slices path."""
    return 2 if gemm.cfg.recorder == "slices" else 1


def alloc_prof_for(gemm: WsGemm, m: int, n: int, k: int, profile_level: int, device="cuda"):
    """``(buffer tensor, max_events)`` for one launch of ``gemm`` at this shape and level, in
    the format its recorder writes: a flat buffer with room for every record (``"staged"``,
    ``"direct"``), or a slices buffer with one slice per warp of every launched CTA, each
    large enough for the busiest warp's regions at two records each (``"slices"``; its
    max_events is 0, unused)."""
    exp = expected_counts(gemm, m, n, k, profile_level)
    if gemm.cfg.recorder != "slices":
        return alloc_prof(exp["total"], device=device), max(1, exp["total"])
    from cute_prof.decode_slices import allocate_slices_buffer

    per_tile = max(sum(exp["per_producer_warp"].values()), sum(exp["per_consumer_warp"].values()))
    tiles = int(exp["tiles_per_cta"].max()) if len(exp["tiles_per_cta"]) else 1
    warps = gemm.num_ctas(m, n) * (gemm.threads_per_cta // 32)
    return allocate_slices_buffer(warps, max(1, words_per_region(gemm) * per_tile * tiles), device=device), 0


_DUMMY = {}


def _dummy_prof(device):
    import torch

    key = str(device)
    if key not in _DUMMY:
        _DUMMY[key] = torch.zeros(8, dtype=torch.int64, device=device)
    return _DUMMY[key]


def _check_args(a, b, c):
    import torch

    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.dtype != torch.bfloat16:
            raise TypeError(f"{name} must be bfloat16, got {t.dtype}")
        if t.dim() != 2 or t.stride(1) != 1:
            raise ValueError(f"{name} must be a row-major 2-D tensor")
        if t.stride(0) % 8 or t.data_ptr() % 16:
            raise ValueError(f"{name}: rows must be 16-byte aligned (TMA)")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"K mismatch: a {tuple(a.shape)}, b {tuple(b.shape)}")
    if tuple(c.shape) != (a.shape[0], b.shape[0]):
        raise ValueError(f"c must be {(a.shape[0], b.shape[0])}, got {tuple(c.shape)}")


# ======================================================================================
# decoding helpers (independent of the host decoder, so the checks below can use them)


def tag_ids() -> dict:
    """{tag name: tag id} as the kernels traced in this process encode them."""
    from cute_prof.tags import default_tag_table

    table = default_tag_table()
    return {name: table.id(name) for name in ALL_TAGS}


def decode_records(words):
    """Raw buffer words -> (records, attempted), through the package decoder. Only complete
    records come back: an incomplete slot shows up as a missing record in the exact counts."""
    from cute_prof.decode import decode_buffer

    trace = decode_buffer(words)
    return trace.events, trace.attempted


def check_counts(records, gemm: WsGemm, m: int, n: int, k: int, profile_level: int) -> list:
    """Exact per-warp record counts. Returns a list of error strings (empty = all good)."""
    import numpy as np

    errors = []
    exp = expected_counts(gemm, m, n, k, profile_level)
    ids = tag_ids()
    ctas = gemm.num_ctas(m, n)
    if len(records) != exp["total"]:
        errors.append(f"total records {len(records)} != expected {exp['total']}")
    cta, slot = split_tid(records["tid"].astype(np.int64))
    if len(records) and (cta.max() >= ctas or slot.max() > gemm.num_consumer_warps):
        errors.append("tid out of range")
    for role, slots, table in (
        ("producer", [PRODUCER_SLOT], exp["per_producer_warp"]),
        ("consumer", list(gemm.recording_slots), exp["per_consumer_warp"]),
    ):
        for name, want in table.items():
            sel = records["tag"] == ids[name]
            for s in slots:
                counts = np.bincount(cta[sel & (slot == s)], minlength=ctas)
                wanted = want * exp["tiles_per_cta"]
                bad = np.nonzero(counts[:ctas] != wanted)[0]
                if bad.size:
                    errors.append(
                        f"{role} slot {s} tag {name}: {bad.size} CTAs with a count != "
                        f"{want} per tile (e.g. CTA {bad[0]}: {counts[bad[0]]}, "
                        f"{exp['tiles_per_cta'][bad[0]]} tiles)"
                    )
        # expected warps: producer records come from warp 0, consumer slot s from warp 3 + s
        if table:
            sel = np.isin(records["tag"], [ids[t] for t in table])
            want_warp = np.where(slot == PRODUCER_SLOT, gemm.producer_warp, gemm.first_consumer_warp - 1 + slot)
            if (records["warp"][sel] != want_warp[sel]).any():
                errors.append(f"{role}: warp field does not match the tid slot")
    extra = ~np.isin(records["tag"], [ids[t] for t in ALL_TAGS])
    if extra.any():
        errors.append(f"{int(extra.sum())} records with unknown tags")
    if profile_level >= 2 and len(records):
        kt = gemm.k_tiles(k)
        per_k = np.isin(records["tag"], [ids[t] for t in (TAG_WAIT_EMPTY, TAG_TMA_ISSUE, TAG_WAIT_FULL, TAG_MMA_KTILE)])
        pl = records["payload"][per_k].astype(np.int64)
        if gemm.persistent:
            # payload = tile_local_index * PERSISTENT_TILE_MODULO + k
            tile_of = pl // PERSISTENT_TILE_MODULO
            pl = pl % PERSISTENT_TILE_MODULO
            owner = np.minimum(cta[per_k], ctas - 1)
            if (tile_of < 0).any() or (tile_of >= exp["tiles_per_cta"][owner]).any():
                errors.append("tile index (payload // tile modulo) out of range")
        if pl.min() < 0 or pl.max() >= kt:
            errors.append("k-tile payload out of range")
    return errors


def emit_ptx(out_dir: str, levels=(0, 1, 2), m: int = 1000, n: int = 1032, k: int = 520,
             recorder: str = "staged", cluster=(2, 1), suffix: str = "", *,
             persistent: bool = False, flight_address: int = 0, flight_slots: int = 0) -> dict:
    """Compile for every level with CPU tensors and write
    ``ws_gemm_{recorder}{suffix}_l{level}.ptx`` into ``out_dir`` (``persistent``: the
    persistent kernel). Needs
    ``CUTE_DSL_ARCH=sm_90a`` (and KEEP=ptx) in the environment when run without a GPU.
    Returns {level: path}."""
    import os

    import torch

    gemm = WsGemm(GemmConfig(recorder=recorder, cluster_m=cluster[0], cluster_n=cluster[1],
                             persistent=persistent, flight_address=flight_address,
                             flight_slots=flight_slots))
    a = torch.zeros(m, k, dtype=torch.bfloat16)
    b = torch.zeros(n, k, dtype=torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    buf = torch.zeros(1 + 4 * 64, dtype=torch.int64)
    paths = {}
    for level in levels:
        compiled = cute.compile(
            gemm,
            _cute_tensor(a),
            _cute_tensor(b),
            _cute_tensor(c),
            _cute_prof_buffer(buf),
            Int32(64),
            default_stream(),
            int(level),
        )
        ptx = compiled.__ptx__
        if not ptx:
            raise RuntimeError("no PTX kept: set CUTE_DSL_KEEP=ptx and CUTE_DSL_DUMP_DIR")
        kind = "persistent_" if persistent else ""
        path = os.path.join(out_dir, f"ws_gemm_{kind}{recorder}{suffix}_l{level}.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        paths[level] = path
    return paths


def _main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emit-ptx", metavar="DIR",
                    help="compile levels 0,1,2 (both recorders; the default cluster, plus "
                    "1x1 and 1x2 as ws_gemm_{recorder}_c{M}x{N}_l{level}.ptx) and write PTX")
    ap.add_argument("--mnk", default="1000,1032,520", help="problem size for a GPU check")
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--recorder", default="staged", choices=RECORDERS)
    ap.add_argument("--cluster-m", type=int, default=GemmConfig.cluster_m, choices=[1, 2])
    ap.add_argument("--cluster-n", type=int, default=GemmConfig.cluster_n, choices=[1, 2])
    ap.add_argument("--persistent", action="store_true",
                    help="the persistent kernel (one CTA per SM looping over tiles); with "
                    "--emit-ptx: levels 0 and 2 of it, as ws_gemm_persistent_{recorder}"
                    "_c{M}x{N}_l{level}.ptx, for the 1x1 and the default cluster")
    args = ap.parse_args(argv)
    if args.emit_ptx and args.persistent:
        for recorder in RECORDERS:
            for cl in [(1, 1), (GemmConfig.cluster_m, GemmConfig.cluster_n)]:
                for level, path in emit_ptx(args.emit_ptx, levels=(0, 2), recorder=recorder,
                                            cluster=cl, suffix=f"_c{cl[0]}x{cl[1]}",
                                            persistent=True).items():
                    print(f"persistent {recorder} cluster {cl[0]}x{cl[1]} level {level}: {path}")
        return 0
    if args.emit_ptx:
        import shutil

        default = (GemmConfig.cluster_m, GemmConfig.cluster_n)
        configs = [(1, 1), (2, 1), (1, 2)]
        if default not in configs:
            configs.append(default)
        for recorder in RECORDERS:
            for cl in configs:
                sfx = f"_c{cl[0]}x{cl[1]}"
                for level, path in emit_ptx(args.emit_ptx, recorder=recorder, cluster=cl,
                                            suffix=sfx).items():
                    print(f"{recorder} cluster {cl[0]}x{cl[1]} level {level}: {path}")
                    if cl == default:  # the default config also without the suffix
                        shutil.copyfile(path, path.replace(sfx, ""))
        return 0
    import torch

    m, n, k = (int(x) for x in args.mnk.split(","))
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    runner = CompiledWsGemm(GemmConfig(recorder=args.recorder, cluster_m=args.cluster_m,
                                       cluster_n=args.cluster_n, persistent=args.persistent))
    exp = expected_counts(runner.gemm, m, n, k, args.level)
    buf, max_events = alloc_prof_for(runner.gemm, m, n, k, args.level)
    runner.prepare(a, b, c, buf, max_events, args.level)()
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    rel = ((c.float() - ref).norm() / ref.norm()).item()
    print(f"{m}x{n}x{k} cluster {args.cluster_m}x{args.cluster_n} level {args.level}: "
          f"rel Frobenius error {rel:.3e}")
    recs, attempted = decode_records(buf.cpu().numpy())
    errs = check_counts(recs, runner.gemm, m, n, k, args.level)
    print(f"records {len(recs)} (buffer records attempted {attempted}, expected "
          f"{words_per_region(runner.gemm) * exp['total']}); count errors: {errs or 'none'}")
    return 0 if rel < 1e-2 and not errs else 1


if __name__ == "__main__":
    raise SystemExit(_main())
