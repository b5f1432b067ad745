//! The fence's hot paths, in one process:
//!
//! * `merge`: one agent gathers N contributions of K keys (64-byte values) through
//!   `hub::Gather` and commits the merged delta into its `kvs::Kvs`.
//! * `tree_fence`: a whole fence over H virtual agents (4 virtual ranks each, one 64-byte key
//!   per rank) linked over loopback TCP with the real framing, for tree widths 8 and flat
//!   (`common::sim`): fan-in to the root and fan-out of the merged delta to every agent.
//! * `tree_fence_floor`: the floor under `tree_fence`, the same shapes over the same loopback
//!   links moving the same bytes and nothing else (`common::raw`: no decoding, merging or
//!   committing); `tree_fence` over it is how far the tree is from the least a fence costs.
//!
//! ```text
//! cargo bench --bench fence
//! cargo bench --bench fence -- tree_fence --warm-up-time 1 --measurement-time 3
//! ```
//! Results: `docs/performance.md`, "Fence hot paths".

mod common;

use common::raw;
use common::sim::{self, Shape};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kauri::hub::Gather;
use kauri::kvs::{Kvs, Packed};
use std::time::Duration;

fn part(n: usize, keys: usize) -> Packed {
    let v = "x".repeat(64);
    let mut p = Packed::default();
    for k in 0..keys {
        p.push(&format!("r{n}k{k}"), &v);
    }
    p
}

fn merge(c: &mut Criterion) {
    let mut g = c.benchmark_group("merge");
    for (n, k) in [(16, 1), (256, 1), (1024, 1), (1024, 16), (16384, 1)] {
        let parts: Vec<Packed> = (0..n).map(|i| part(i, k)).collect();
        g.throughput(Throughput::Elements((n * k) as u64));
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("N={n} K={k}")),
            &parts,
            |b, parts| {
                b.iter_batched(
                    || parts.clone(),
                    |parts| {
                        let mut gather: Gather = Gather::new(false, (0..n as u32).collect());
                        let mut merged = None;
                        for (i, p) in parts.into_iter().enumerate() {
                            merged = gather.child(i as u32, 0, p);
                        }
                        let (_, d) = merged.expect("complete");
                        let mut kvs = Kvs::default();
                        kvs.commit_packed(&d).expect("unpacks");
                        black_box(kvs.len())
                    },
                    criterion::BatchSize::LargeInput,
                )
            },
        );
    }
    g.finish();
}

fn tree_fence(c: &mut Criterion) {
    let mut g = c.benchmark_group("tree_fence");
    g.sample_size(10);
    for hosts in [8, 64, 256] {
        for width in [8, 0] {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let local = tokio::task::LocalSet::new();
            let shape = Shape {
                hosts,
                width,
                ranks: 4,
                keys: 1,
                vsize: 64,
                commit: true,
                hop_us: 0.0,
                gbps: 10.0,
            };
            let mut tree = local
                .block_on(&rt, sim::start(shape))
                .expect("build the tree");
            let w = if width == 0 {
                "flat".into()
            } else {
                width.to_string()
            };
            g.bench_function(BenchmarkId::new(format!("width={w}"), hosts), |b| {
                b.iter_custom(|iters| {
                    local.block_on(&rt, async {
                        let mut t = Duration::ZERO;
                        for _ in 0..iters {
                            t += tree.fence().await;
                        }
                        t
                    })
                })
            });
        }
    }
    g.finish();
}

/// The floor under `tree_fence`: the same shapes moving the same bytes with nothing else
/// (`common::raw`).
fn tree_fence_floor(c: &mut Criterion) {
    let mut g = c.benchmark_group("tree_fence_floor");
    g.sample_size(10);
    for hosts in [8, 64, 256] {
        for width in [8, 0] {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let local = tokio::task::LocalSet::new();
            let shape = Shape {
                hosts,
                width,
                ranks: 4,
                keys: 1,
                vsize: 64,
                commit: true,
                hop_us: 0.0,
                gbps: 10.0,
            };
            let mut tree = local
                .block_on(&rt, raw::start(shape))
                .expect("build the tree");
            let w = if width == 0 {
                "flat".into()
            } else {
                width.to_string()
            };
            g.bench_function(BenchmarkId::new(format!("width={w}"), hosts), |b| {
                b.iter_custom(|iters| {
                    local.block_on(&rt, async {
                        let mut t = Duration::ZERO;
                        for _ in 0..iters {
                            t += tree.fence().await;
                        }
                        t
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, merge, tree_fence, tree_fence_floor);
criterion_main!(benches);
