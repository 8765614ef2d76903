//! Maps that give back their room, so that a long-lived worker's memory follows what it uses now.

use std::collections::HashMap;

/// Gives back the room of a map that is mostly empty (a quarter used, or less): a worker that once used many
/// sessions keeps no memory for them.
pub(crate) fn shrink_if_mostly_empty<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to_fit();
    }
}
