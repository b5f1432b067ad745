//! Throughput of the PMI wire codec (`pmi-wire`): parse and encode of typical messages, in
//! messages per second (`Throughput::Elements(1)`). Results: `docs/performance.md`, "Codec".

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use pmi_wire::v2::{Frame, Lookup};
use pmi_wire::{v1, v2, Spawn, SpawnCommand, Status};

fn spawn() -> Spawn {
    Spawn {
        commands: vec![
            SpawnCommand {
                execname: "/usr/bin/worker".into(),
                nprocs: 4,
                args: vec!["--mode".into(), "fast".into(), "input file.dat".into()],
                info: vec![
                    ("wdir".into(), "/tmp".into()),
                    ("host".into(), "n1,n2".into()),
                ],
            },
            SpawnCommand {
                execname: "/usr/bin/monitor".into(),
                nprocs: 1,
                args: vec![],
                info: vec![],
            },
        ],
        preput: vec![(
            "PARENT_ROOT_PORT_NAME".into(),
            "tag#0$description#node1$port#40123$ifname#10.0.0.1$".into(),
        )],
    }
}

/// Benchmarks parse and encode of one message given by value.
fn bench_msg<M>(
    c: &mut Criterion,
    name: &str,
    msg: M,
    encode: fn(&M, &mut BytesMut),
    parse: fn(&[u8]) -> Option<M>,
) where
    M: PartialEq + std::fmt::Debug,
{
    let mut wire = BytesMut::new();
    encode(&msg, &mut wire);
    let wire = wire.freeze();
    assert_eq!(
        parse(&wire).as_ref(),
        Some(&msg),
        "{name} does not round-trip"
    );
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse", |b| b.iter(|| parse(black_box(&wire))));
    let mut buf = BytesMut::with_capacity(wire.len() * 2);
    g.bench_function("encode", |b| {
        b.iter(|| {
            buf.clear();
            encode(black_box(&msg), &mut buf);
        })
    });
    g.finish();
}

fn v1_req_parse(b: &[u8]) -> Option<v1::Request> {
    v1::Request::parse(b).ok().flatten().map(|(m, _)| m)
}

fn v1_resp_parse(b: &[u8]) -> Option<v1::Response> {
    v1::Response::parse(b).ok().flatten().map(|(m, _)| m)
}

fn v2_req_parse(b: &[u8]) -> Option<Frame<v2::Request>> {
    Frame::<v2::Request>::parse(b)
        .ok()
        .flatten()
        .map(|(m, _)| m)
}

fn v2_resp_parse(b: &[u8]) -> Option<Frame<v2::Response>> {
    Frame::<v2::Response>::parse(b)
        .ok()
        .flatten()
        .map(|(m, _)| m)
}

fn codec(c: &mut Criterion) {
    let kvs = "kvs_7430_0_1600642784_vm".to_string();
    // A business card as MPICH writes it: hex, about 100 bytes.
    let card: String = "204925D10A882E91762000637577CC2B3200F8D74F0000000000".repeat(2);
    bench_msg(
        c,
        "v1_put",
        v1::Request::Put {
            kvsname: kvs.clone(),
            key: "P0-businesscard".into(),
            value: card.clone(),
        },
        v1::Request::encode,
        v1_req_parse,
    );
    bench_msg(
        c,
        "v1_get_result",
        v1::Response::GetResult {
            status: Status::ok(),
            value: Some(card.clone()),
        },
        v1::Response::encode,
        v1_resp_parse,
    );
    bench_msg(
        c,
        "v1_put_1KiB",
        v1::Request::Put {
            kvsname: kvs.clone(),
            key: "P0-businesscard-seg-1/2".into(),
            value: "0123456789ABCDEF".repeat(64),
        },
        v1::Request::encode,
        v1_req_parse,
    );
    bench_msg(
        c,
        "v2_kvs_get",
        Frame::new(v2::Request::KvsGet {
            jobid: Some(kvs.clone()),
            srcid: Some(3),
            key: "P3-businesscard".into(),
        }),
        Frame::<v2::Request>::encode,
        v2_req_parse,
    );
    bench_msg(
        c,
        "v2_kvs_get_response",
        Frame::new(v2::Response::KvsGet(Lookup::found(card.clone()))),
        Frame::<v2::Response>::encode,
        v2_resp_parse,
    );
    bench_msg(
        c,
        "v1_spawn",
        v1::Request::Spawn(spawn()),
        v1::Request::encode,
        v1_req_parse,
    );
    bench_msg(
        c,
        "v2_spawn",
        Frame::new(v2::Request::Spawn(spawn())),
        Frame::<v2::Request>::encode,
        v2_req_parse,
    );
}

criterion_group!(benches, codec);
criterion_main!(benches);
