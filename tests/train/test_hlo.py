"""Collectives read from HLO text: kinds, bytes, replica groups in each form, and executions of
those inside while loops (known trip count, or an `i < N` condition)."""

import pytest

from transformer_jax.train import hlo

PROGRAM = """HloModule jit_step, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[]{:T(128)} constant(24)
  ROOT %lt.1 = pred[] compare(%i, %n), direction=LT
}

%fused (x: bf16[2,64]) -> (bf16[2,64], bf16[8,64], /*index=2*/u32[]) {
  %x = bf16[2,64]{1,0} parameter(0)
  %all-gather.1 = bf16[8,64]{1,0:T(8,128)} all-gather(%x), GROUPS, dimensions={0}
}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %g = bf16[2,64]{1,0} parameter(1)
  %ag = (bf16[2,64], bf16[8,64], /*index=2*/u32[]) fusion(%g), kind=kCustom, calls=%fused
  %rs = f32[1024]{0} reduce-scatter(f32[4096]{0} %y), replica_groups=[2,4]<=[8], dimensions={0}, to_apply=%add
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %ar = f32[256]{0} all-reduce-start(f32[256]{0} %a), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  %ard = f32[256]{0} all-reduce-done(f32[256]{0} %ar)
  %w = (s32[], f32[8]{0}) while(%t), condition=%cond, body=%body
  %w2 = (s32[], f32[8]{0}) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %cp = f32[8]{0} collective-permute(f32[8]{0} %a), source_target_pairs={{0,1},{1,0}}
}
""".replace("GROUPS", "replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([8]) {'axis_1'}")


def test_collectives_counted_as_executed():
    found = hlo.collectives(PROGRAM, n_devices=8)
    by_kind = {(c["kind"], c["count"], c["group"], c["bytes"]) for c in found}
    assert ("all-reduce", 1, 2, 1024) in by_kind, "the -start counts once, the -done not at all"
    assert ("collective-permute", 1, 8, 32) in by_kind
    # the body runs 24 times (i < 24) in one loop and 3 times (known_trip_count) in the other
    assert ("all-gather", 27, 4, 8 * 64 * 2) in by_kind, "inside a fusion the body calls"
    assert ("reduce-scatter", 27, 4, 4096 * 4) in by_kind
    summary = hlo.summarize(found)
    assert summary["all-gather"] == {"count": 27, "bytes": 27 * 1024.0}
    assert summary["all-to-all"] == {"count": 0, "bytes": 0.0}


def test_ring_time_per_kind():
    one = lambda kind, group: [{"kind": kind, "bytes": 1000.0, "group": group, "count": 2}]
    assert hlo.collective_seconds(one("all-gather", 4), 1000.0) == pytest.approx(2 * 0.75)
    assert hlo.collective_seconds(one("all-reduce", 4), 1000.0) == pytest.approx(2 * 1.5)
    assert hlo.collective_seconds(one("collective-permute", 2), 1000.0) == pytest.approx(2.0)
    assert hlo.collective_seconds(one("all-reduce", 1), 1000.0) == 0.0
