//! The fence's hot paths, in one process:
//!
//! * `merge`: one agent gathers N contributions of K keys (64-byte values) through
//!   `hub::Gather` and commits the merged delta into its `kvs::Kvs`.
//! * `tree_fence`: a whole fence over H virtual agents (4 virtual ranks each, one 64-byte key
//!   per rank) linked over loopback TCP with the real framing, for tree widths 8 and flat
//!   (`common::sim`): fan-in to the root and fan-out of the merged delta to every agent.
//! * `pmix_tree_fence`: the same for a PMIx fence: each agent hands the tree an opaque blob of
//!   the size of its PMI contribution (as a host's PMIx server hands kauri's fence upcall),
//!   blobs are concatenated on the way up and every host gets all of them.
//! * `commit`: a fence's commit in the steady state (the same keys as the last fence's delta,
//!   which the new one replaces): the root's one check of the merged delta (`check`), and an
//!   agent's commit, which takes the root's word, in one warm store and in turn over 256.
//! * `tree_fence_floor`: the floor under `tree_fence`, the same shapes over the same loopback
//!   links moving the same bytes and nothing else (`common::raw`: no decoding, merging or
//!   committing; each agent keeps the last whole it received, as a store must); `tree_fence`
//!   over it is how far the tree is from the least a fence costs.
//!
//! ```text
//! cargo bench --bench fence
//! cargo bench --bench fence -- tree_fence --warm-up-time 1 --measurement-time 3
//! KAURI_BENCH_1024=1 cargo bench --bench fence -- "tree_fence|pmix_tree" # and 1,024 hosts
//! python3 benches/fence_rotate.py before=BIN,after=BIN width=8/256,width=flat/256 3 # builds
//! ```
//! `fence_rotate.py` runs several builds' binaries of this bench in turn, round after round, so
//! a comparison of builds (or of a build with the floor) is made in one run.
//! Results: `docs/performance.md`, "Fences across simulated hosts" and "Fence hot paths".

mod common;

use common::raw;
use common::sim::{self, Shape};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kauri::proto::kvs::{FenceKeys, Kvs, Packed};
use kauri::tree::hub::Gather;
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

/// The steady state of a fence's commit: the root checks the merged delta once
/// (`check`: the whole walk, and whether its keys are the last one's), then each agent's
/// store, which holds the last fence's merged delta, takes the next one (the same keys, as a
/// job that puts the same keys every fence sends) in its place without walking it; in one
/// store, warm, and in turn over 256 stores (the simulated tree's 256 agents, whose deltas do
/// not fit in this machine's L2 together).
fn commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("commit");
    let delta = |hosts: u32| {
        let mut d = Packed::default();
        for h in 0..hosts {
            d.append(&sim::contribution(h, &shape(hosts as usize, 0, Kind::Pmi)));
        }
        d
    };
    for (hosts, stores) in [(256u32, 1usize), (256, 256)] {
        let d = delta(hosts);
        let copies: Vec<Packed> = (0..stores)
            .map(|_| Packed::from_pairs(d.pairs().map(|p| p.expect("packed"))))
            .collect();
        let mut kvs: Vec<Kvs> = copies
            .iter()
            .map(|p| {
                let mut k = Kvs::default();
                k.commit_packed(p).expect("unpacks");
                k
            })
            .collect();
        g.throughput(Throughput::Bytes(d.byte_len() as u64));
        if stores == 1 {
            let mut keys = FenceKeys::default();
            keys.check(&d).expect("unpacks");
            g.bench_function(BenchmarkId::new("check", hosts), |b| {
                b.iter(|| assert!(keys.check(black_box(&d)).expect("unpacks")))
            });
        }
        g.bench_function(BenchmarkId::new(format!("stores={stores}"), hosts), |b| {
            let mut i = 0;
            b.iter(|| {
                let k = &mut kvs[i % stores];
                k.commit_checked(&copies[i % stores], true);
                i += 1;
                // (not `len`: it would index the store, which a commit does not)
                black_box(&*k);
            })
        });
    }
    g.finish();
}

/// The benches' job: 4 virtual ranks per agent, each putting one 64-byte key per fence.
fn shape(hosts: usize, width: usize, kind: Kind) -> Shape {
    Shape {
        hosts,
        width,
        ranks: 4,
        keys: 1,
        vsize: 64,
        commit: true,
        hop_us: 0.0,
        gbps: 10.0,
        pmix: matches!(kind, Kind::Pmix),
        // timed like the floor: the tree's work, not the model's clock reads
        model: false,
    }
}

/// What a `tree_*` group runs over the simulated tree.
#[derive(Clone, Copy)]
enum Kind {
    /// kauri's PMI fence (`common::sim`).
    Pmi,
    /// kauri's PMIx fence: blobs of the same size (`Shape::pmix`).
    Pmix,
    /// The floor: the same bytes over the same links, nothing else (`common::raw`).
    Floor,
}

/// The simulated host counts: 8, 64 and 256, and 1,024 when `KAURI_BENCH_1024` is set (its
/// trees take a while to build and a fence there takes tens of milliseconds).
fn host_counts() -> Vec<usize> {
    let mut h = vec![8, 64, 256];
    if std::env::var_os("KAURI_BENCH_1024").is_some() {
        h.push(1024);
    }
    h
}

/// A whole fence over the [`host_counts`] virtual agents, width 8 and flat.
fn tree_group(c: &mut Criterion, name: &str, kind: Kind) {
    let mut g = c.benchmark_group(name);
    g.sample_size(10);
    for hosts in host_counts() {
        for width in [8, 0] {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let local = tokio::task::LocalSet::new();
            let shape = shape(hosts, width, kind);
            let mut tree = match kind {
                Kind::Floor => Tree::Raw(local.block_on(&rt, raw::start(shape)).expect("tree")),
                _ => Tree::Sim(local.block_on(&rt, sim::start(shape)).expect("tree")),
            };
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
                            t += match &mut tree {
                                Tree::Sim(s) => s.fence().await,
                                Tree::Raw(r) => r.fence().await,
                            };
                        }
                        t
                    })
                })
            });
        }
    }
    g.finish();
}

/// A running tree of either kind.
enum Tree {
    Sim(sim::SimTree),
    Raw(raw::RawTree),
}

fn tree_fence(c: &mut Criterion) {
    tree_group(c, "tree_fence", Kind::Pmi);
}

fn pmix_tree_fence(c: &mut Criterion) {
    tree_group(c, "pmix_tree_fence", Kind::Pmix);
}

fn tree_fence_floor(c: &mut Criterion) {
    tree_group(c, "tree_fence_floor", Kind::Floor);
}

criterion_group!(
    benches,
    merge,
    commit,
    tree_fence,
    pmix_tree_fence,
    tree_fence_floor
);
criterion_main!(benches);
