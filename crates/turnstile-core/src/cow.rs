//! Copy-on-write ordered collections for the replicated state: [`Map`] and [`Set`], persistent
//! B-trees (`imbl`) behind the subset of the `BTreeMap`/`BTreeSet` API the state machine uses.
//!
//! Why: a snapshot, a backup or `/v1/cluster`'s digest needs the whole state as of one applied
//! index. With `std` maps that meant a deep clone, or an encode, under the state lock, so apply
//! stopped for time proportional to the state (about 0.1 s at 50,000 locks and 200,000 keys).
//! Cloning these is O(1): the tree's nodes are shared until one side writes, and then only the
//! path to the written entry is copied. So the lock is held for a pointer copy and the O(state)
//! work runs beside apply.
//!
//! The wire format is that of the `std` collections (serde map and sequence, in key order), so
//! encoded states, snapshots and golden files are byte for byte what they were.

use std::borrow::Borrow;
use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A map value kept behind a reference-counted pointer, for the state's large records: a map's
/// B-tree leaf holds 16 key-value slots inline and is rarely full, so a 152-byte value costs
/// its size again in empty slots, and every copy of a shared leaf (the first write after a
/// snapshot's clone) deep-copied 16 of them. Behind `Shared` a slot is 8 bytes, a leaf copy
/// bumps reference counts, and a write copies only the value written (`DerefMut` is
/// `Arc::make_mut`). Encoded as the value itself, so the wire format does not change.
#[derive(Clone, PartialEq, Eq)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    pub fn new(value: T) -> Self {
        Shared(Arc::new(value))
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Shared::new(value)
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// Copies the value first if a clone of the map still shares it.
impl<T: Clone> std::ops::DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Shared::new)
    }
}

/// An ordered map whose clone is O(1) (see the module docs).
#[derive(Clone, PartialEq, Eq)]
pub struct Map<K: Ord + Clone, V: Clone>(imbl::OrdMap<K, V>);

/// An ordered set whose clone is O(1).
#[derive(Clone, PartialEq, Eq)]
pub struct Set<T: Ord + Clone>(imbl::OrdSet<T>);

/// An entry of a [`Map`], as `BTreeMap::entry` gives.
pub type Entry<'a, K, V> = imbl::ordmap::Entry<'a, K, V, imbl::shared_ptr::DefaultSharedPtr>;

impl<K: Ord + Clone, V: Clone> Default for Map<K, V> {
    fn default() -> Self {
        Map(imbl::OrdMap::new())
    }
}

impl<K: Ord + Clone, V: Clone> Map<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.get(key)
    }

    /// Copies the path to `key` if it is shared with a clone (see the module docs).
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.get_mut(key)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.contains_key(key)
    }

    /// The value `key` had, as `BTreeMap::insert`.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.0.insert(key, value)
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.remove(key)
    }

    pub fn entry(&mut self, key: K) -> Entry<'_, K, V> {
        self.0.entry(key)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_ {
        self.0.iter()
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + '_ {
        self.0.keys()
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + '_ {
        self.0.values()
    }

    pub fn range<R, Q>(&self, range: R) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_
    where
        R: RangeBounds<Q>,
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.range(range)
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.0.get_min().map(|(k, v)| (k, v))
    }

    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.0.get_max().map(|(k, v)| (k, v))
    }

    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let key = self.0.get_min()?.0.clone();
        self.0.remove_with_key(&key)
    }

    /// Keeps the entries `keep` accepts. Two passes (the map cannot be edited while it is
    /// walked); used only off the hot path.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let gone: Vec<K> = self
            .0
            .iter()
            .filter(|(k, v)| !keep(k, v))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.0.remove(&k);
        }
    }
}

impl<T: Ord + Clone> Default for Set<T> {
    fn default() -> Self {
        Set(imbl::OrdSet::new())
    }
}

impl<T: Ord + Clone> Set<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains<Q>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.contains(value)
    }

    /// True if `value` was not there, as `BTreeSet::insert`.
    pub fn insert(&mut self, value: T) -> bool {
        self.0.insert(value).is_none()
    }

    /// True if `value` was there, as `BTreeSet::remove`.
    pub fn remove<Q>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.remove(value).is_some()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.0.iter()
    }

    pub fn range<R, Q>(&self, range: R) -> impl DoubleEndedIterator<Item = &T> + '_
    where
        R: RangeBounds<Q>,
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.range(range)
    }

    pub fn first(&self) -> Option<&T> {
        self.0.get_min()
    }

    pub fn last(&self) -> Option<&T> {
        self.0.get_max()
    }

    pub fn pop_first(&mut self) -> Option<T> {
        self.0.remove_min()
    }
}

impl<K: Ord + Clone + fmt::Debug, V: Clone + fmt::Debug> fmt::Debug for Map<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter()).finish()
    }
}

impl<T: Ord + Clone + fmt::Debug> fmt::Debug for Set<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.iter()).finish()
    }
}

/// As `BTreeMap`'s: panics if `key` is absent.
impl<K, V, Q> std::ops::Index<&Q> for Map<K, V>
where
    K: Ord + Clone + Borrow<Q>,
    V: Clone,
    Q: Ord + ?Sized,
{
    type Output = V;

    fn index(&self, key: &Q) -> &V {
        &self.0[key]
    }
}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for Map<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Map(iter.into_iter().collect())
    }
}

impl<T: Ord + Clone> FromIterator<T> for Set<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Set(iter.into_iter().collect())
    }
}

impl<K: Ord + Clone, V: Clone> Extend<(K, V)> for Map<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.0.insert(k, v);
        }
    }
}

impl<T: Ord + Clone> Extend<T> for Set<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for v in iter {
            self.0.insert(v);
        }
    }
}

impl<'a, K: Ord + Clone, V: Clone> IntoIterator for &'a Map<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = imbl::ordmap::Iter<'a, K, V, imbl::shared_ptr::DefaultSharedPtr>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a, T: Ord + Clone> IntoIterator for &'a Set<T> {
    type Item = &'a T;
    type IntoIter = imbl::ordset::Iter<'a, T, imbl::shared_ptr::DefaultSharedPtr>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<K: Ord + Clone + Serialize, V: Clone + Serialize> Serialize for Map<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter())
    }
}

impl<T: Ord + Clone + Serialize> Serialize for Set<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

/// Decoded through the `std` collection, which has the same wire format and bounds what it
/// reads the same way; then moved into the tree.
impl<'de, K, V> Deserialize<'de> for Map<K, V>
where
    K: Ord + Clone + Deserialize<'de>,
    V: Clone + Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<K, V>::deserialize(d)?;
        Ok(map.into_iter().collect())
    }
}

impl<'de, T> Deserialize<'de> for Set<T>
where
    T: Ord + Clone + Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let set = std::collections::BTreeSet::<T>::deserialize(d)?;
        Ok(set.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    #[test]
    fn encodes_as_the_std_collections_do() {
        let std_map: BTreeMap<String, u64> = [("b".into(), 2), ("a".into(), 1)].into();
        let cow_map: Map<String, u64> = std_map.clone().into_iter().collect();
        let std_set: BTreeSet<(u64, String)> = [(2, "x".into()), (1, "y".into())].into();
        let cow_set: Set<(u64, String)> = std_set.clone().into_iter().collect();
        let enc = |v: &dyn erased::Enc| v.enc();
        assert_eq!(enc(&std_map), enc(&cow_map));
        assert_eq!(enc(&std_set), enc(&cow_set));
        let back: Map<String, u64> = crate::codec::decode(&enc(&std_map)).expect("decode");
        assert_eq!(back, cow_map);
    }

    #[test]
    fn a_clone_does_not_see_later_writes() {
        let mut a: Map<u64, String> = (0..1_000).map(|i| (i, i.to_string())).collect();
        let b = a.clone();
        a.insert(5, "changed".into());
        a.remove(&6);
        *a.get_mut(&7).expect("7") = "seven".into();
        assert_eq!(b.get(&5).map(String::as_str), Some("5"));
        assert_eq!(b.get(&6).map(String::as_str), Some("6"));
        assert_eq!(b.get(&7).map(String::as_str), Some("7"));
        assert_eq!(a.len(), 999);
        assert_eq!(b.len(), 1_000);
    }

    #[test]
    fn a_shared_value_encodes_as_the_value_and_is_copied_on_write() {
        let plain: Map<String, Vec<u64>> = [("a".to_string(), vec![1, 2])].into_iter().collect();
        let mut shared: Map<String, Shared<Vec<u64>>> =
            [("a".to_string(), vec![1, 2].into())].into_iter().collect();
        let enc = |v: &dyn erased::Enc| v.enc();
        assert_eq!(enc(&plain), enc(&shared));
        let back: Map<String, Shared<Vec<u64>>> =
            crate::codec::decode(&enc(&plain)).expect("decode");
        assert_eq!(back, shared);

        let snapshot = shared.clone();
        shared.get_mut("a").expect("a").push(3);
        assert_eq!(snapshot.get("a").map(|v| v.len()), Some(2));
        assert_eq!(shared.get("a").map(|v| v.len()), Some(3));
    }

    #[test]
    fn btree_api_answers_the_same() {
        let mut s: Set<u64> = Set::new();
        assert!(s.insert(3));
        assert!(!s.insert(3));
        assert!(s.insert(1));
        assert_eq!(s.first(), Some(&1));
        assert_eq!(s.pop_first(), Some(1));
        assert!(s.remove(&3));
        assert!(!s.remove(&3));
        let mut m: Map<u64, u64> = (0..10).map(|i| (i, i * i)).collect();
        assert_eq!(m.pop_first(), Some((0, 0)));
        assert_eq!(m.last_key_value(), Some((&9, &81)));
        m.retain(|k, _| k % 2 == 0);
        assert_eq!(m.keys().copied().collect::<Vec<_>>(), vec![2, 4, 6, 8]);
        assert_eq!(
            m.range(3..7).map(|(k, _)| *k).collect::<Vec<_>>(),
            vec![4, 6]
        );
    }

    /// Encoding through the crate's codec, whatever the value's type.
    mod erased {
        pub trait Enc {
            fn enc(&self) -> Vec<u8>;
        }
        impl<T: serde::Serialize> Enc for T {
            fn enc(&self) -> Vec<u8> {
                crate::codec::encode(self).expect("encode")
            }
        }
    }
}
