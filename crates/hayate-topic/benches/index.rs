//! Topic matching against 10k and 1M subscriptions, exact-heavy and wildcard-heavy (divan).
//! Run: `cargo bench -p hayate-topic`; CI compiles and runs each once with `-- --test`.
#![allow(missing_docs)]

use hayate_topic::SubscriptionIndex;

fn main() {
    divan::main();
}

/// `n` per-device exact filters `site/<s>/dev/<d>/temp` plus a few wildcard ones.
fn exact_heavy(n: usize) -> SubscriptionIndex<u64, u32> {
    let mut index = SubscriptionIndex::new();
    for i in 0..n {
        index.insert(&format!("site/{}/dev/{}/temp", i % 100, i), i as u64, 0);
    }
    index.insert("site/+/dev/+/temp", u64::MAX, 0);
    index.insert("site/#", u64::MAX - 1, 0);
    index
}

/// `n` wildcard filters spread over the tree: `site/<s>/+/<d>/#` and `+/<s>/dev/<d>/temp`.
fn wildcard_heavy(n: usize) -> SubscriptionIndex<u64, u32> {
    let mut index = SubscriptionIndex::new();
    for i in 0..n {
        let filter = if i % 2 == 0 {
            format!("site/{}/+/{}/#", i % 100, i)
        } else {
            format!("+/{}/dev/{}/temp", i % 100, i)
        };
        index.insert(&filter, i as u64, 0);
    }
    index
}

const COUNTS: &[usize] = &[10_000, 1_000_000];

#[divan::bench(args = COUNTS, sample_count = 20)]
fn match_exact_heavy(bencher: divan::Bencher, n: usize) {
    let index = exact_heavy(n);
    let topic = format!("site/{}/dev/{}/temp", 4242 % 100, 4242);
    bencher.bench_local(|| {
        let mut matches = 0;
        index.for_each_match(divan::black_box(&topic), |_, _, _| matches += 1);
        matches
    });
}

#[divan::bench(args = COUNTS, sample_count = 20)]
fn match_wildcard_heavy(bencher: divan::Bencher, n: usize) {
    let index = wildcard_heavy(n);
    let topic = format!("site/{}/dev/{}/temp", 4242 % 100, 4242);
    bencher.bench_local(|| {
        let mut matches = 0;
        index.for_each_match(divan::black_box(&topic), |_, _, _| matches += 1);
        matches
    });
}

/// One topic with 1,000 subscribers (the router's fan-out lookup).
#[divan::bench]
fn match_fan_out_1k(bencher: divan::Bencher) {
    let mut index = SubscriptionIndex::new();
    for i in 0..1_000u64 {
        index.insert("news/all", i, 0u32);
    }
    bencher.bench_local(|| {
        let mut matches = 0;
        index.for_each_match(divan::black_box("news/all"), |_, _, _| matches += 1);
        matches
    });
}
