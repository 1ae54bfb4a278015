//! Choosing an upstream peer: smooth weighted round robin, least_conn,
//! ip_hash, hash KEY [consistent] (a ketama-style ring), random [two]; with
//! nginx's passive health rules (max_fails within fail_timeout), `down`,
//! `backup` peers and `max_conns`. State is per worker, as in nginx without a
//! shared zone: no locks on the request path.
//!
//! Peers sit in slots that keep their number while the peer is a member:
//! the peers of `server … resolve` lines come and go at run time
//! ([`Balancer::put`], [`Balancer::remove`]); a slot whose peer left is
//! skipped, and taken by a new peer once no attempt is left on it.

use std::net::IpAddr;
use std::time::{Duration, Instant};

/// A peer as configured by `server ADDR [weight=] [max_fails=] …`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSpec {
    /// Address as written after resolution ("127.0.0.1:8080", "unix:/run/app.sock");
    /// also the identity hashed into the consistent ring.
    pub name: String,
    pub weight: u32,
    /// 0 disables failure accounting.
    pub max_fails: u32,
    pub fail_timeout: Duration,
    pub backup: bool,
    pub down: bool,
    /// 0 is unlimited.
    pub max_conns: u32,
}

impl PeerSpec {
    pub fn new(name: &str) -> PeerSpec {
        PeerSpec {
            name: name.to_string(),
            weight: 1,
            max_fails: 1,
            fail_timeout: Duration::from_secs(10),
            backup: false,
            down: false,
            max_conns: 0,
        }
    }
}

/// The balancing method of an upstream block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    RoundRobin,
    LeastConn,
    IpHash,
    Hash { consistent: bool },
    Random { two: bool },
}

/// Run-time state of one peer in one worker.
#[derive(Clone, Debug, Default)]
struct State {
    current: i64,
    fails: u32,
    /// Start of the current failure window / of the time out of service.
    failed_at: Option<Instant>,
    conns: u32,
    /// Its peer left (a resolved address gone): never chosen.
    gone: bool,
}

/// Tries made for one request, so a retry never picks the same peer twice:
/// a bit per peer, the first 64 inline (no allocation per request).
#[derive(Clone, Debug, Default)]
pub struct Tried {
    first: u64,
    rest: Vec<u64>,
}

impl Tried {
    pub fn mark(&mut self, i: usize) {
        if i < 64 {
            self.first |= 1 << i;
            return;
        }
        let (w, b) = ((i - 64) / 64, (i - 64) % 64);
        if self.rest.len() <= w {
            self.rest.resize(w + 1, 0);
        }
        self.rest[w] |= 1 << b;
    }
    pub fn has(&self, i: usize) -> bool {
        if i < 64 {
            return self.first & (1 << i) != 0;
        }
        let (w, b) = ((i - 64) / 64, (i - 64) % 64);
        self.rest.get(w).is_some_and(|x| x & (1 << b) != 0)
    }
}

/// Points per unit of weight on the consistent-hash ring.
const RING_POINTS: u32 = 160;
/// Rehashes before a hash method falls back to round robin, as nginx.
const REHASH_TRIES: u32 = 20;

/// One upstream's peers and their state in this worker.
#[derive(Debug)]
pub struct Balancer {
    peers: Vec<PeerSpec>,
    state: Vec<State>,
    method: Method,
    /// (point, peer) sorted by point, for `hash … consistent`.
    ring: Vec<(u32, usize)>,
    rng: u64,
    /// Slots whose peer is a member.
    live: usize,
    /// Changes of membership so far.
    generation: u64,
}

impl Balancer {
    pub fn new(peers: Vec<PeerSpec>, method: Method) -> Balancer {
        let mut b = Balancer {
            state: vec![State::default(); peers.len()],
            live: peers.len(),
            peers,
            method,
            ring: Vec::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
            generation: 0,
        };
        b.make_ring();
        b
    }

    /// The consistent-hash ring of the live peers.
    fn make_ring(&mut self) {
        self.ring.clear();
        if self.method != (Method::Hash { consistent: true }) {
            return;
        }
        for (i, p) in self.peers.iter().enumerate() {
            if self.state[i].gone {
                continue;
            }
            for k in 0..RING_POINTS * p.weight.max(1) {
                let mut h = crc32fast::Hasher::new();
                h.update(p.name.as_bytes());
                h.update(&[0]);
                h.update(&k.to_le_bytes());
                self.ring.push((h.finalize(), i));
            }
        }
        self.ring.sort_unstable();
    }

    /// Slots, live or not.
    pub fn slots(&self) -> usize {
        self.peers.len()
    }

    /// Is the peer of slot `i` a member?
    pub fn is_live(&self, i: usize) -> bool {
        !self.state[i].gone
    }

    /// The peer of slot `i` (the last one, for a slot whose peer left).
    pub fn spec(&self, i: usize) -> &PeerSpec {
        &self.peers[i]
    }

    /// Changes of membership so far ([`Balancer::put`], [`Balancer::remove`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A new peer takes slot `i` (a free one, see [`Balancer::free_slot`],
    /// or the next after the last), its state fresh.
    pub fn put(&mut self, i: usize, spec: PeerSpec) {
        if i == self.peers.len() {
            self.peers.push(spec);
            self.state.push(State::default());
        } else {
            debug_assert!(self.state[i].gone && self.state[i].conns == 0);
            self.peers[i] = spec;
            self.state[i] = State::default();
        }
        self.live += 1;
        self.generation += 1;
        self.make_ring();
    }

    /// The peer of slot `i` leaves: it is never chosen again; attempts on it
    /// still end on it ([`Balancer::finished`]), and the slot is free once
    /// none is left.
    pub fn remove(&mut self, i: usize) {
        if !self.state[i].gone {
            self.state[i].gone = true;
            self.live -= 1;
            self.generation += 1;
            self.make_ring();
        }
    }

    /// The first free slot at or after `from` (no peer, no attempt left on
    /// it), or the next after the last.
    pub fn free_slot(&self, from: usize) -> usize {
        (from..self.peers.len())
            .find(|&i| self.state[i].gone && self.state[i].conns == 0)
            .unwrap_or(self.peers.len())
    }

    /// Connections this worker has open to peer `i`.
    pub fn conns(&self, i: usize) -> u32 {
        self.state[i].conns
    }

    /// Until when this worker holds peer `i` failed (max_fails failures within
    /// fail_timeout), or `None` when its failures do not take it out of service.
    pub fn failed_until(&self, i: usize) -> Option<Instant> {
        let (p, s) = (&self.peers[i], &self.state[i]);
        if self.live == 1 || p.max_fails == 0 || s.fails < p.max_fails {
            return None;
        }
        s.failed_at.map(|t| t + p.fail_timeout)
    }

    /// Is peer `i` usable now (not down, not failed out, under max_conns)?
    pub fn available(&self, i: usize, now: Instant) -> bool {
        let (p, s) = (&self.peers[i], &self.state[i]);
        if s.gone || p.down || (p.max_conns != 0 && s.conns >= p.max_conns) {
            return false;
        }
        // As nginx: a lone peer is never failed out (there is nothing else
        // to send its requests to).
        self.live == 1
            || p.max_fails == 0
            || s.fails < p.max_fails
            || s.failed_at
                .is_none_or(|t| now.duration_since(t) >= p.fail_timeout)
    }

    /// Is a peer not yet tried, not down, only held back by max_conns (so a
    /// request may wait for it)?
    pub fn at_max_conns(&self, tried: &Tried) -> bool {
        (0..self.peers.len()).any(|i| {
            let p = &self.peers[i];
            let s = &self.state[i];
            !tried.has(i) && !s.gone && !p.down && p.max_conns != 0 && s.conns >= p.max_conns
        })
    }

    /// Choose a peer for the next attempt of a request, or `None` when no peer
    /// can take it. `key`: the client address bytes for ip_hash, the rendered
    /// key for hash; ignored otherwise. The caller counts the connection with
    /// `connected` and reports the outcome with `finished`.
    pub fn pick(&mut self, key: &[u8], tried: &Tried, now: Instant) -> Option<usize> {
        let usable = |b: &Self, i: usize| !tried.has(i) && b.available(i, now);
        let primary = |b: &Self, i: usize| !b.peers[i].backup && usable(b, i);
        let chosen = match self.method {
            // An empty hash key falls back to round robin, as nginx.
            Method::RoundRobin | Method::Hash { .. } if key.is_empty() => {
                self.smooth(|b, i| primary(b, i))
            }
            Method::RoundRobin => self.smooth(|b, i| primary(b, i)),
            Method::LeastConn => self.least_conn(|b, i| primary(b, i)),
            Method::IpHash | Method::Hash { consistent: false } => {
                self.hashed(key, |b, i| primary(b, i))
            }
            Method::Hash { consistent: true } => self.on_ring(key, |b, i| primary(b, i)),
            Method::Random { two } => self.random(two, |b, i| primary(b, i)),
        };
        // Backups serve only when no primary peer can.
        chosen.or_else(|| self.smooth(|b, i| b.peers[i].backup && usable(b, i)))
    }

    /// A connection to peer `i` opened (for least_conn, random two, max_conns).
    pub fn connected(&mut self, i: usize) {
        self.state[i].conns += 1;
    }

    /// The attempt on peer `i` ended: `ok` false counts a failure (error,
    /// timeout, or a status listed in next_upstream); true clears them.
    pub fn finished(&mut self, i: usize, ok: bool, now: Instant) {
        let p = &self.peers[i];
        let s = &mut self.state[i];
        s.conns = s.conns.saturating_sub(1);
        if ok {
            // Success after the failure window closes the window.
            if s.failed_at
                .is_none_or(|t| now.duration_since(t) >= p.fail_timeout)
            {
                s.fails = 0;
                s.failed_at = None;
            }
            return;
        }
        if s.failed_at
            .is_none_or(|t| now.duration_since(t) >= p.fail_timeout)
        {
            s.fails = 0;
        }
        s.fails += 1;
        s.failed_at = Some(now);
    }

    /// Smooth weighted round robin over the peers `ok` admits.
    fn smooth(&mut self, ok: impl Fn(&Self, usize) -> bool) -> Option<usize> {
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for i in 0..self.peers.len() {
            if !ok(self, i) {
                continue;
            }
            let w = i64::from(self.peers[i].weight.max(1));
            self.state[i].current += w;
            total += w;
            if best.is_none_or(|b| self.state[i].current > self.state[b].current) {
                best = Some(i);
            }
        }
        let b = best?;
        self.state[b].current -= total;
        Some(b)
    }

    /// Fewest connections relative to weight; ties by smooth round robin.
    fn least_conn(&mut self, ok: impl Fn(&Self, usize) -> bool) -> Option<usize> {
        let mut best: Option<usize> = None;
        for i in 0..self.peers.len() {
            if !ok(self, i) {
                continue;
            }
            if best.is_none_or(|b| self.load_cmp(i, b).is_lt()) {
                best = Some(i);
            }
        }
        let b = best?;
        self.smooth(|s, i| ok(s, i) && s.load_cmp(i, b).is_eq())
    }

    /// Compare conns/weight of peers `a` and `b` without division.
    fn load_cmp(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let la = u64::from(self.state[a].conns) * u64::from(self.peers[b].weight.max(1));
        let lb = u64::from(self.state[b].conns) * u64::from(self.peers[a].weight.max(1));
        la.cmp(&lb)
    }

    /// ip_hash and plain hash, computed as nginx computes them (so a key
    /// reaches the same peer as behind nginx): a weighted slot from the key's
    /// hash; rehash when that peer cannot serve; round robin after
    /// `REHASH_TRIES`.
    fn hashed(&mut self, key: &[u8], ok: impl Fn(&Self, usize) -> bool) -> Option<usize> {
        let weight = |b: &Self, i: usize| {
            if b.state[i].gone {
                0
            } else {
                u64::from(b.peers[i].weight.max(1))
            }
        };
        let total: u64 = (0..self.peers.len()).map(|i| weight(self, i)).sum();
        if total == 0 {
            return None;
        }
        let ip = self.method == Method::IpHash;
        let mut hash: u64 = if ip { 89 } else { 0 };
        for rehash in 0..=REHASH_TRIES {
            if ip {
                for &b in key {
                    hash = (hash * 113 + u64::from(b)) % 6271;
                }
            } else {
                // Cache::Memcached's: ((crc32([REHASH] KEY) >> 16) & 0x7fff)
                // added to the previous value, REHASH left out the first time.
                let mut c = crc32fast::Hasher::new();
                if rehash > 0 {
                    c.update(rehash.to_string().as_bytes());
                }
                c.update(key);
                hash += u64::from((c.finalize() >> 16) & 0x7fff);
            }
            let mut slot = hash % total;
            let mut chosen = 0;
            for i in 0..self.peers.len() {
                let w = weight(self, i);
                if slot < w {
                    chosen = i;
                    break;
                }
                slot -= w;
            }
            if ok(self, chosen) {
                return Some(chosen);
            }
        }
        self.smooth(ok)
    }

    /// hash … consistent: the first ring point at or after the key's hash whose
    /// peer can serve.
    fn on_ring(&mut self, key: &[u8], ok: impl Fn(&Self, usize) -> bool) -> Option<usize> {
        if self.ring.is_empty() {
            return None;
        }
        let h = crc32fast::hash(key);
        let start = self.ring.partition_point(|(p, _)| *p < h);
        (0..self.ring.len())
            .map(|k| self.ring[(start + k) % self.ring.len()].1)
            .find(|&i| ok(self, i))
    }

    /// random: a weighted random peer; `two`: the less loaded of two.
    fn random(&mut self, two: bool, ok: impl Fn(&Self, usize) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.peers.len()).filter(|&i| ok(self, i)).collect();
        let total: u64 = candidates
            .iter()
            .map(|&i| u64::from(self.peers[i].weight.max(1)))
            .sum();
        if total == 0 {
            return None;
        }
        let draw = |b: &mut Self| {
            let mut slot = b.next_random() % total;
            for &i in &candidates {
                let w = u64::from(b.peers[i].weight.max(1));
                if slot < w {
                    return i;
                }
                slot -= w;
            }
            candidates[candidates.len() - 1]
        };
        let a = draw(self);
        if !two || candidates.len() < 2 {
            return Some(a);
        }
        let b = draw(self);
        Some(if self.load_cmp(b, a).is_lt() { b } else { a })
    }

    /// xorshift64*: cheap, per worker, good enough to spread load.
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The ip_hash key of a client address: the first three octets of IPv4 (so a
/// /24 sticks to one peer, as nginx), the whole IPv6 address.
pub fn ip_hash_key(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets()[..3].to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(weights: &[u32]) -> Vec<PeerSpec> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| PeerSpec {
                weight: w,
                ..PeerSpec::new(&format!("10.0.0.{}:80", i + 1))
            })
            .collect()
    }

    #[test]
    fn tried_marks_any_peer() {
        let mut t = Tried::default();
        for i in [0, 63, 64, 200] {
            assert!(!t.has(i));
            t.mark(i);
            assert!(t.has(i));
        }
        assert!(!t.has(1) && !t.has(65) && !t.has(199) && !t.has(1000));
        assert!(t.clone().has(200));
    }

    fn picks(b: &mut Balancer, n: usize, key: &[u8]) -> Vec<usize> {
        let now = Instant::now();
        (0..n)
            .map(|_| b.pick(key, &Tried::default(), now).unwrap())
            .collect()
    }

    fn counts(p: &[usize], n: usize) -> Vec<usize> {
        (0..n)
            .map(|i| p.iter().filter(|&&x| x == i).count())
            .collect()
    }

    #[test]
    fn smooth_round_robin_sequence_and_weights() {
        let mut b = Balancer::new(peers(&[5, 1, 1]), Method::RoundRobin);
        // The smooth order spreads the heavy peer out.
        assert_eq!(picks(&mut b, 7, b""), vec![0, 0, 1, 0, 2, 0, 0]);
        let mut b = Balancer::new(peers(&[3, 2, 1]), Method::RoundRobin);
        assert_eq!(counts(&picks(&mut b, 600, b""), 3), vec![300, 200, 100]);
    }

    #[test]
    fn down_backup_and_failures() {
        let now = Instant::now();
        let mut ps = peers(&[1, 1, 1]);
        ps[1].down = true;
        ps[2].backup = true;
        let mut b = Balancer::new(ps, Method::RoundRobin);
        assert_eq!(counts(&picks(&mut b, 10, b""), 3), vec![10, 0, 0]);
        // Peer 0 fails once (max_fails 1): the backup takes over...
        assert_eq!(b.failed_until(0), None);
        b.connected(0);
        b.finished(0, false, now);
        assert_eq!(b.failed_until(0), Some(now + Duration::from_secs(10)));
        assert_eq!(b.pick(b"", &Tried::default(), now), Some(2));
        // ...until fail_timeout has passed.
        let later = now + Duration::from_secs(11);
        assert_eq!(b.pick(b"", &Tried::default(), later), Some(0));
        // A retry never repeats a peer; with all tried there is none.
        let mut tried = Tried::default();
        tried.mark(0);
        tried.mark(2);
        assert_eq!(b.pick(b"", &tried, later), None);
    }

    #[test]
    fn max_conns_and_least_conn() {
        let now = Instant::now();
        let mut ps = peers(&[1, 1]);
        ps[0].max_conns = 1;
        let mut b = Balancer::new(ps, Method::LeastConn);
        let first = b.pick(b"", &Tried::default(), now).unwrap();
        b.connected(first);
        let second = b.pick(b"", &Tried::default(), now).unwrap();
        assert_ne!(first, second, "least_conn avoids the busy peer");
        b.connected(second);
        // Peer 0 is at max_conns; only peer 1 can take another.
        b.connected(1);
        assert_eq!(b.pick(b"", &Tried::default(), now), Some(1));
        // Weights: with conns 2 on a weight-3 peer and 1 on a weight-1 peer, 3 wins.
        let mut b = Balancer::new(peers(&[3, 1]), Method::LeastConn);
        b.connected(0);
        b.connected(0);
        b.connected(1);
        assert_eq!(b.pick(b"", &Tried::default(), now), Some(0));
    }

    #[test]
    fn ip_hash_sticks_per_network() {
        let mut b = Balancer::new(peers(&[1, 1, 1]), Method::IpHash);
        let a = ip_hash_key("192.0.2.10".parse().unwrap());
        let same_net = ip_hash_key("192.0.2.99".parse().unwrap());
        let first = picks(&mut b, 1, &a)[0];
        assert!(picks(&mut b, 20, &a).iter().all(|&p| p == first));
        // nginx's arithmetic: 89, then (h * 113 + byte) % 6271 over
        // 127, 0, 0 gives 4040; 4040 % 3 is the third peer.
        let local = ip_hash_key("127.0.0.1".parse().unwrap());
        assert_eq!(picks(&mut b, 1, &local)[0], 2);
        // Cache::Memcached's crc32 for hash: crc32("a") = 0xe8b7be43,
        // (0xe8b7 & 0x7fff) % 3 = 26807 % 3 = 2.
        let mut h = Balancer::new(peers(&[1, 1, 1]), Method::Hash { consistent: false });
        assert_eq!(picks(&mut h, 1, b"a")[0], 2);
        assert_eq!(picks(&mut b, 1, &same_net)[0], first);
        // Many networks spread over all peers.
        let spread: Vec<usize> = (0..300u32)
            .map(|n| {
                let ip = IpAddr::from([10, (n >> 8) as u8, n as u8, 1]);
                b.pick(&ip_hash_key(ip), &Tried::default(), Instant::now())
                    .unwrap()
            })
            .collect();
        assert!(
            counts(&spread, 3).iter().all(|&c| c > 60),
            "{:?}",
            counts(&spread, 3)
        );
    }

    #[test]
    fn hash_rehashes_away_from_an_unavailable_peer() {
        let now = Instant::now();
        let mut b = Balancer::new(peers(&[1, 1, 1]), Method::Hash { consistent: false });
        let p = b.pick(b"/some/key", &Tried::default(), now).unwrap();
        let mut tried = Tried::default();
        tried.mark(p);
        let q = b.pick(b"/some/key", &tried, now).unwrap();
        assert_ne!(p, q);
    }

    #[test]
    fn an_empty_hash_key_is_round_robin() {
        let now = Instant::now();
        for consistent in [false, true] {
            let mut b = Balancer::new(peers(&[1, 1, 1]), Method::Hash { consistent });
            assert_eq!(counts(&picks(&mut b, 6, b""), 3), [2, 2, 2]);
            let one = b.pick(b"k", &Tried::default(), now).unwrap();
            assert!((0..5).all(|_| b.pick(b"k", &Tried::default(), now) == Some(one)));
        }
    }

    #[test]
    fn consistent_hash_moves_few_keys_when_a_peer_is_added() {
        let keys: Vec<String> = (0..2000).map(|i| format!("/obj/{i}")).collect();
        let now = Instant::now();
        let mut four = Balancer::new(peers(&[1, 1, 1, 1]), Method::Hash { consistent: true });
        let mut five = Balancer::new(peers(&[1, 1, 1, 1, 1]), Method::Hash { consistent: true });
        let moved = keys
            .iter()
            .filter(|k| {
                let a = four.pick(k.as_bytes(), &Tried::default(), now).unwrap();
                let b = five.pick(k.as_bytes(), &Tried::default(), now).unwrap();
                a != b
            })
            .count();
        // Ideally 1/5 of the keys move (to the new peer); allow some spread.
        assert!(moved < 2000 * 3 / 10, "{moved} keys moved");
        let all = keys
            .iter()
            .map(|k| five.pick(k.as_bytes(), &Tried::default(), now).unwrap())
            .collect::<Vec<_>>();
        assert!(
            counts(&all, 5).iter().all(|&c| c > 250),
            "{:?}",
            counts(&all, 5)
        );
    }

    #[test]
    fn members_come_and_go() {
        let now = Instant::now();
        for method in [
            Method::RoundRobin,
            Method::LeastConn,
            Method::Hash { consistent: false },
            Method::Hash { consistent: true },
            Method::Random { two: true },
        ] {
            let mut b = Balancer::new(peers(&[1, 1]), method);
            b.put(2, PeerSpec::new("10.0.0.3:80"));
            assert_eq!(b.slots(), 3);
            assert_eq!(b.generation(), 1);
            // An attempt on peer 1, then it leaves: never chosen again.
            b.connected(1);
            b.remove(1);
            assert!(!b.is_live(1));
            for k in 0..50 {
                let key = format!("/k{k}");
                let p = b.pick(key.as_bytes(), &Tried::default(), now).unwrap();
                assert_ne!(p, 1, "{method:?}");
            }
            // Its slot is not free until its attempt ends.
            assert_eq!(b.free_slot(0), 3);
            b.finished(1, true, now);
            assert_eq!(b.free_slot(0), 1);
            b.put(1, PeerSpec::new("10.0.0.4:80"));
            assert_eq!(b.spec(1).name, "10.0.0.4:80");
            let seen: std::collections::HashSet<usize> = (0..60)
                .map(|k| {
                    let key = format!("/k{k}");
                    b.pick(key.as_bytes(), &Tried::default(), now).unwrap()
                })
                .collect();
            assert_eq!(seen.len(), 3, "{method:?}");
        }
        // A lone live peer is never failed out, as a lone fixed one.
        let mut b = Balancer::new(peers(&[1, 1]), Method::RoundRobin);
        b.remove(0);
        b.connected(1);
        b.finished(1, false, now);
        assert_eq!(b.pick(b"", &Tried::default(), now), Some(1));
    }

    #[test]
    fn random_respects_weights_and_two_prefers_idle() {
        let mut b = Balancer::new(peers(&[3, 1]), Method::Random { two: false });
        let c = counts(&picks(&mut b, 4000, b""), 2);
        assert!((2700..3300).contains(&c[0]), "{c:?}");
        let mut b = Balancer::new(peers(&[1, 1]), Method::Random { two: true });
        for _ in 0..50 {
            b.connected(0);
        }
        let c = counts(&picks(&mut b, 200, b""), 2);
        assert!(c[1] > 140, "{c:?}");
    }
}
