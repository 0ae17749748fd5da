//! IPAM: allocation rate on an IPv4 /16 and memory of an IPv6 /64.
//!
//! `cargo bench -p perf --bench ipam` prints the memory table first (measured with the
//! counting allocator installed below), then divan's timings; `item/s` is allocations
//! per second (for churn: one release plus one allocation per item).

use std::hint::black_box;
use std::net::IpAddr;

use control::ipam::{Family, Ipam, Owner, SubnetPool};
use control::model::{PodIpRequest, Protocol, ValidSubnet};
use divan::Bencher;
use divan::counter::ItemsCount;

#[global_allocator]
static ALLOC: perf::alloc::Counting = perf::alloc::Counting;

/// Usable addresses of a /16: 65536 minus network, broadcast and gateway.
const SLASH16_USABLE: usize = 65_533;
/// Items per churn sample.
const CHURN: usize = 1_000;

fn spec(name: &str, cidr: &str, gateway: &str) -> ValidSubnet {
    ValidSubnet {
        name: name.into(),
        protocol: if cidr.contains(':') {
            Protocol::IPv6
        } else {
            Protocol::IPv4
        },
        cidrs: vec![cidr.parse().expect("benchmark CIDR")],
        gateways: vec![gateway.parse().expect("benchmark gateway")],
        excludes: vec![],
        vlan_id: None,
        provider: None,
        external_logical_switch: None,
        security_groups: vec![],
        namespaces: vec![],
        default: false,
        nat_outgoing: true,
    }
}

fn slash16() -> ValidSubnet {
    spec("b16", "10.0.0.0/16", "10.0.0.1")
}

fn slash64() -> ValidSubnet {
    spec("b64", "fd00:64::/64", "fd00:64::1")
}

fn pod_keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("default/pod-{i}")).collect()
}

/// xorshift64: cheap, deterministic picks for churn.
struct Pick(u64);
impl Pick {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

// ---------- per-subnet allocator ----------

/// Allocate every address of a /16 (round-robin `allocate_next`).
#[divan::bench]
fn pool_allocate_all_slash16(bencher: Bencher) {
    let pool = SubnetPool::new(&slash16()).expect("subnet");
    let owner: Owner = "default/pod".into();
    bencher
        .counter(ItemsCount::new(SLASH16_USABLE))
        .with_inputs(|| pool.clone())
        .bench_local_values(|mut p| {
            for _ in 0..SLASH16_USABLE {
                black_box(p.allocate_next(Family::V4, &owner).expect("free address"));
            }
            p
        });
}

/// A /16 with 60,000 addresses in use: release a random one, allocate the next.
#[divan::bench]
fn pool_churn_slash16(bencher: Bencher) {
    let mut pool = SubnetPool::new(&slash16()).expect("subnet");
    let owner: Owner = "default/pod".into();
    let mut used: Vec<IpAddr> = (0..60_000)
        .map(|_| {
            pool.allocate_next(Family::V4, &owner)
                .expect("free address")
        })
        .collect();
    let mut pick = Pick(0x9e37_79b9_7f4a_7c15);
    bencher.counter(ItemsCount::new(CHURN)).bench_local(|| {
        for _ in 0..CHURN {
            let i = pick.next(used.len());
            pool.release(used[i]);
            used[i] = pool
                .allocate_next(Family::V4, &owner)
                .expect("free address");
        }
    });
}

/// 10,000 allocations in an IPv6 /64.
#[divan::bench]
fn pool_allocate_10k_slash64(bencher: Bencher) {
    let pool = SubnetPool::new(&slash64()).expect("subnet");
    let owner: Owner = "default/pod".into();
    bencher
        .counter(ItemsCount::new(10_000usize))
        .with_inputs(|| pool.clone())
        .bench_local_values(|mut p| {
            for _ in 0..10_000 {
                black_box(p.allocate_next(Family::V6, &owner).expect("free address"));
            }
            p
        });
}

// ---------- the whole Ipam (pod keys, leases, MACs) ----------

/// `Ipam::assign` for 65,533 pods on a /16 (derived MACs, leases, owners).
#[divan::bench]
fn ipam_assign_all_slash16(bencher: Bencher) {
    let mut ipam = Ipam::new();
    ipam.add_subnet(&slash16()).expect("subnet");
    let keys = pod_keys(SLASH16_USABLE);
    let req = PodIpRequest::default();
    bencher
        .counter(ItemsCount::new(SLASH16_USABLE))
        .with_inputs(|| ipam.clone())
        .bench_local_values(|mut ipam| {
            for k in &keys {
                black_box(ipam.assign(k, "b16", &req).expect("free address"));
            }
            ipam
        });
}

/// A /16 with 60,000 pods: release a random pod, assign it again (new address).
#[divan::bench]
fn ipam_churn_slash16(bencher: Bencher) {
    let mut ipam = Ipam::new();
    ipam.add_subnet(&slash16()).expect("subnet");
    let keys = pod_keys(60_000);
    let req = PodIpRequest::default();
    for k in &keys {
        ipam.assign(k, "b16", &req).expect("free address");
    }
    let mut pick = Pick(0x2545_f491_4f6c_dd1d);
    bencher.counter(ItemsCount::new(CHURN)).bench_local(|| {
        for _ in 0..CHURN {
            let k = &keys[pick.next(keys.len())];
            ipam.release(k);
            black_box(ipam.assign(k, "b16", &req).expect("free address"));
        }
    });
}

// ---------- memory ----------

fn live() -> usize {
    perf::alloc::live_bytes()
}

fn memory_report() {
    println!("IPAM memory (bytes live in the counting allocator)");
    println!("{:<52} {:>12} {:>10}", "state", "bytes", "bytes/IP");

    let row = |what: &str, bytes: usize, n: usize| {
        let per = if n == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", bytes as f64 / n as f64)
        };
        println!("{what:<52} {bytes:>12} {per:>10}");
    };

    // allocator alone: the free-space ranges plus the used map
    let base = live();
    let mut pool = SubnetPool::new(&slash64()).expect("subnet");
    let empty = live() - base;
    row("SubnetPool /64, 0 allocations", empty, 0);
    let owner: Owner = "default/pod".into();
    for _ in 0..10_000 {
        pool.allocate_next(Family::V6, &owner)
            .expect("free address");
    }
    row("SubnetPool /64, 10,000 allocations", live() - base, 10_000);
    println!(
        "  free-space ranges after 10,000: {} (heap estimate {} bytes)",
        pool.range_count(),
        pool.heap_bytes_estimate()
    );
    drop(pool);

    // the whole Ipam: subnet, leases, MAC registry, pod keys
    let base = live();
    let mut ipam = Ipam::new();
    ipam.add_subnet(&slash64()).expect("subnet");
    row("Ipam with a /64 subnet, 0 pods", live() - base, 0);
    let keys = pod_keys(10_000);
    let keys_bytes = live() - base;
    let req = PodIpRequest::default();
    for k in &keys {
        ipam.assign(k, "b64", &req).expect("free address");
    }
    row(
        "Ipam with a /64 subnet, 10,000 pods (excl. key Vec)",
        live() - base - keys_bytes,
        10_000,
    );
    drop(ipam);
    drop(keys);

    let base = live();
    let mut pool = SubnetPool::new(&slash16()).expect("subnet");
    for _ in 0..SLASH16_USABLE {
        pool.allocate_next(Family::V4, &owner)
            .expect("free address");
    }
    row(
        "SubnetPool /16, full (65,533 allocations)",
        live() - base,
        SLASH16_USABLE,
    );
    drop(pool);
    println!();
}

fn main() {
    memory_report();
    divan::main();
}
