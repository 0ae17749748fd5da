//! The megaflow guard's cost on ovs-vswitchd dumps of growing size (see
//! `dataplane::datapath::megaflow_guard`): parsing a `dpctl/dump-flows -m` text and the overlap test.
//!
//! `cargo bench -p perf --bench megaflow`. The flows are what a busy pod port gives: one
//! thread, one recirculation id, one in_port (the worst case: the overlap test is quadratic
//! within such a group), distinct source ports and addresses, two kinds of actions, no
//! overlap between them. `item/s` counts flows.

use std::hint::black_box;

use dataplane::datapath::megaflow::{conflicting_overlaps, parse_dump};
use divan::Bencher;
use divan::counter::ItemsCount;

const SIZES: [usize; 4] = [250, 1000, 2000, 4000];

fn dump(n: usize) -> String {
    let mut s = String::from("flow-dump from pmd on cpu core: 1\n");
    for i in 0..n {
        let (a, b) = (i / 250, i % 250);
        let actions = if i % 2 == 0 {
            "ct(commit,zone=8,mark=0/0x1),6"
        } else {
            "drop"
        };
        // even flows: tcp/80 from 10.80.a.b; odd: tcp/81 (disjoint by port)
        let port = 80 + (i % 2);
        s.push_str(&format!(
            "ufid:{i:08x}-0000-0000-0000-000000000000, skb_priority(0/0),skb_mark(0/0),\
             ct_state(0x21/0x3f),ct_zone(0x8/0),ct_mark(0/0x1),ct_label(0/0),\
             recirc_id(0xad),dp_hash(0/0),in_port(8),packet_type(ns=0,id=0),\
             eth(src=0a:58:0a:4d:03:0c,dst=0a:58:0a:4d:01:0a),eth_type(0x0800),\
             ipv4(src=10.80.{a}.{b},dst=10.77.1.10,proto=6,tos=0/0,ttl=64/0,frag=no),\
             tcp(src={}/0,dst={port}),tcp_flags(0/0), packets:{i}, bytes:1, used:0.1s, \
             dp:ovs, actions:{actions}, dp-extra-info:miniflow_bits(5,3)\n",
            1024 + i
        ));
    }
    s
}

#[divan::bench(args = SIZES)]
fn parse(bencher: Bencher, n: usize) {
    let text = dump(n);
    bencher
        .counter(ItemsCount::new(n))
        .bench(|| black_box(parse_dump(black_box(&text))));
}

#[divan::bench(args = SIZES)]
fn overlaps(bencher: Bencher, n: usize) {
    let flows = parse_dump(&dump(n));
    assert_eq!(flows.len(), n);
    bencher
        .counter(ItemsCount::new(n))
        .bench(|| black_box(conflicting_overlaps(black_box(&flows))));
}

fn main() {
    // no conflicts in the generated dumps: the whole test runs
    assert!(conflicting_overlaps(&parse_dump(&dump(250))).is_empty());
    divan::main();
}
