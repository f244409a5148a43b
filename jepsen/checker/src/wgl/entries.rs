//! The search's data structures: the time-ordered entry list with dancing-links lift and
//! unlift, the bitset of linearized operations, and the memo's hasher.

use std::hash::Hasher;

use crate::history::{Op, TimeNs};

/// Index of the list's sentinel head.
pub(super) const HEAD: usize = 0;

/// What a node of the entry list stands for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Head,
    /// An operation's call, and the node of its return (`None` for `info`: return at infinity).
    Call {
        ret: Option<usize>,
    },
    Return,
}

/// A node of the doubly linked entry list, linked by index into one `Vec`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Node {
    pub(super) kind: Kind,
    /// Index into the partition's operations (unused for the head).
    pub(super) op: usize,
    prev: usize,
    pub(super) next: Option<usize>,
}

/// The call and return entries in time order behind a sentinel head. Lifting a call unlinks
/// it and its return; unlifting in reverse (LIFO) order restores them exactly, because an
/// unlinked node keeps its own `prev` and `next` (dancing links).
pub(super) struct EntryList {
    pub(super) nodes: Vec<Node>,
}

impl EntryList {
    pub(super) fn new(ops: &[&Op]) -> Self {
        // (time, calls before returns, op index): the op index only makes ties deterministic.
        let mut entries: Vec<(TimeNs, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            entries.push((op.call_ns, false, i));
            if let Some(ret) = op.ret_ns {
                entries.push((ret, true, i));
            }
        }
        entries.sort_unstable();
        let mut ret_node = vec![None; ops.len()];
        for (pos, &(_, is_return, i)) in entries.iter().enumerate() {
            if is_return {
                ret_node[i] = Some(pos + 1);
            }
        }
        let mut nodes = Vec::with_capacity(entries.len() + 1);
        nodes.push(Node {
            kind: Kind::Head,
            op: usize::MAX,
            prev: HEAD,
            next: (!entries.is_empty()).then_some(1),
        });
        for (pos, &(_, is_return, i)) in entries.iter().enumerate() {
            let node = pos + 1;
            nodes.push(Node {
                kind: if is_return {
                    Kind::Return
                } else {
                    Kind::Call { ret: ret_node[i] }
                },
                op: i,
                prev: node - 1,
                next: (node < entries.len()).then_some(node + 1),
            });
        }
        Self { nodes }
    }

    pub(super) fn first(&self) -> Option<usize> {
        self.nodes[HEAD].next
    }

    pub(super) fn unlink(&mut self, n: usize) {
        let Node { prev, next, .. } = self.nodes[n];
        self.nodes[prev].next = next;
        if let Some(next) = next {
            self.nodes[next].prev = prev;
        }
    }

    pub(super) fn relink(&mut self, n: usize) {
        let Node { prev, next, .. } = self.nodes[n];
        self.nodes[prev].next = Some(n);
        if let Some(next) = next {
            self.nodes[next].prev = n;
        }
    }

    /// Removes a call and its return from the list.
    pub(super) fn lift(&mut self, call: usize) {
        self.unlink(call);
        if let Kind::Call { ret: Some(ret) } = self.nodes[call].kind {
            self.unlink(ret);
        }
    }

    /// Undoes the most recent [`Self::lift`] still in force.
    pub(super) fn unlift(&mut self, call: usize) {
        if let Kind::Call { ret: Some(ret) } = self.nodes[call].kind {
            self.relink(ret);
        }
        self.relink(call);
    }
}

/// A set of linearized operations, one bit per operation. `Default` is the empty placeholder
/// left behind while a set is moved into a memo probe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Bitset(pub(super) Box<[u64]>);

impl Bitset {
    pub(super) fn new(bits: usize) -> Self {
        Self(vec![0; bits.div_ceil(64)].into_boxed_slice())
    }

    pub(super) fn assign(&mut self, bit: usize, on: bool) {
        let mask = 1 << (bit % 64);
        if on {
            self.0[bit / 64] |= mask;
        } else {
            self.0[bit / 64] &= !mask;
        }
    }

    pub(super) fn is_subset_of(&self, other: &Self) -> bool {
        self.0.iter().zip(other.0.iter()).all(|(a, b)| a & !b == 0)
    }
}

/// FxHash (rustc's hasher) with a final mix. The memo hashes a bitset per search step and
/// never sees adversarial keys, so SipHash's cost buys nothing; the final mix spreads the
/// multiply's high-bit entropy into the low bits the table indexes by, since neighbouring
/// bitsets differ in one bit.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FxHasher {
    hash: u64,
}

impl FxHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    pub(super) fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        for &byte in chunks.remainder() {
            self.add(u64::from(byte));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // MurmurHash3's fmix64.
        let mut h = self.hash;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}
