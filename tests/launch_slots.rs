//! A parent launches more children than it has launch slots: every slot is freed when its
//! agent connects, so the rest still start (before the fix, slots were held until the agents
//! ended and the job hung).

mod common;

#[test]
fn more_children_than_launch_slots() {
    let hosts: Vec<String> = (1..=10).map(|i| format!("s{i}")).collect();
    // Every rank waits in a fence for all the others, so no agent ends before all started.
    let script = format!("{} kvs fence && echo ok $KAURI_HOST", common::KAURI);
    let h = hosts.join(",");
    let out = common::kauri(
        &[
            "-launcher",
            "fork",
            "-tree-width",
            "flat",
            "-hosts",
            &h,
            "-n",
            "10",
            "sh",
            "-c",
            &script,
        ],
        None,
        &[("KAURI_LAUNCH_CONCURRENCY", "3")],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let mut want: Vec<String> = hosts.iter().map(|h| format!("ok {h}")).collect();
    want.sort();
    assert_eq!(common::lines(&out), want);
}
