use super::*;

fn answer(bytes: usize) -> Vec<NamedTensor> {
    let tensor = Tensor::dense(
        crate::tensor::DataType::U8,
        vec![bytes],
        Bytes::from(vec![7u8; bytes]),
    );
    match tensor {
        Ok(tensor) => vec![("y".to_owned(), tensor)],
        Err(err) => panic!("{err}"),
    }
}

/// What one entry of `answer(bytes)` under a key of `key_len` bytes is charged.
fn charge(key_len: usize, bytes: usize) -> u64 {
    ENTRY_OVERHEAD
        + TENSOR_OVERHEAD
        + allocation(1)
        + allocation(8)
        + allocation(key_len as u64)
        + allocation(bytes as u64)
}

fn key(hash: u64, text: &str) -> RequestKey {
    RequestKey::with_hash(hash, text.as_bytes())
}

#[test]
fn a_stored_answer_is_found_by_its_key_only() {
    let store = ResponseStore::new(1 << 20);
    assert!(store.insert(1, key(1, "a"), &answer(4)));
    assert_eq!(store.get(&key(1, "a")).map(|a| a.to_vec()), Some(answer(4)));
    assert!(store.get(&key(2, "b")).is_none());
}

#[test]
fn colliding_hashes_never_share_an_answer() {
    let store = ResponseStore::new(1 << 20);
    assert!(store.insert(1, key(42, "first"), &answer(1)));
    // Same hash, other request: a miss, not the first request's answer.
    assert!(store.get(&key(42, "second")).is_none());
    assert!(store.insert(1, key(42, "second"), &answer(2)));
    assert_eq!(
        store.get(&key(42, "first")).map(|a| a.to_vec()),
        Some(answer(1))
    );
    assert_eq!(
        store.get(&key(42, "second")).map(|a| a.to_vec()),
        Some(answer(2))
    );
    assert_eq!(store.usage().entries, 2);
}

#[test]
fn the_least_recently_used_entry_goes_first() {
    let one = charge(1, 100);
    let store = ResponseStore::new(3 * one);
    for (hash, name) in [(1, "a"), (2, "b"), (3, "c")] {
        assert!(store.insert(1, key(hash, name), &answer(100)));
    }
    // `a` is used again, so `b` is now the oldest.
    assert!(store.get(&key(1, "a")).is_some());
    assert!(store.insert(1, key(4, "d"), &answer(100)));
    assert!(store.get(&key(2, "b")).is_none());
    for (hash, name) in [(1, "a"), (3, "c"), (4, "d")] {
        assert!(store.get(&key(hash, name)).is_some(), "{name}");
    }
    let usage = store.usage();
    assert_eq!(
        (usage.entries, usage.bytes, usage.evictions),
        (3, 3 * one, 1)
    );
}

#[test]
fn the_bytes_held_never_pass_the_capacity() {
    let capacity = 10_000;
    let store = ResponseStore::new(capacity);
    for i in 0..1_000u64 {
        let name = format!("key-{i}");
        assert!(store.insert(1, key(i, &name), &answer((i % 300) as usize)));
        assert!(store.usage().bytes <= capacity);
    }
    let usage = store.usage();
    assert!(usage.evictions > 900, "{usage:?}");
    assert!(usage.entries > 0);
}

#[test]
fn an_answer_larger_than_the_store_is_not_kept() {
    let store = ResponseStore::new(charge(1, 100));
    assert!(store.insert(1, key(1, "a"), &answer(100)));
    // The next size the allocator gives a block (a byte more rounds to the same block).
    assert!(!store.insert(1, key(2, "b"), &answer(100 + 16)));
    // Refusing it evicted nothing.
    assert!(store.get(&key(1, "a")).is_some());
    assert_eq!(store.usage().evictions, 0);
}

#[test]
fn dropping_a_scope_frees_its_entries_only() {
    let store = ResponseStore::new(1 << 20);
    assert!(store.insert(1, key(1, "a"), &answer(10)));
    assert!(store.insert(2, key(2, "b"), &answer(10)));
    assert!(store.insert(1, key(3, "c"), &answer(10)));
    store.drop_scope(1);
    assert!(store.get(&key(1, "a")).is_none());
    assert!(store.get(&key(3, "c")).is_none());
    assert!(store.get(&key(2, "b")).is_some());
    assert_eq!(store.usage().entries, 1);
    assert_eq!(store.usage().bytes, charge(1, 10));
    // Slots freed by the drop are reused, and the list still links.
    assert!(store.insert(3, key(4, "d"), &answer(10)));
    assert!(store.insert(3, key(5, "e"), &answer(10)));
    assert_eq!(store.usage().entries, 3);
}

#[test]
fn the_same_key_stored_twice_is_held_once() {
    let store = ResponseStore::new(1 << 20);
    assert!(store.insert(1, key(1, "a"), &answer(10)));
    assert!(store.insert(1, key(1, "a"), &answer(10)));
    assert_eq!(store.usage().entries, 1);
    assert_eq!(store.usage().bytes, charge(1, 10));
}

#[test]
fn a_stored_answer_is_a_copy_of_the_outputs() {
    let store = ResponseStore::new(1 << 20);
    let outputs = answer(16);
    assert!(store.insert(1, key(1, "a"), &outputs));
    let stored = store.get(&key(1, "a"));
    let stored_ptr = stored
        .as_ref()
        .and_then(|a| a.first())
        .and_then(|(_, t)| t.bytes())
        .map(|b| b.as_ptr());
    let original_ptr = outputs
        .first()
        .and_then(|(_, t)| t.bytes())
        .map(|b| b.as_ptr());
    assert!(stored_ptr.is_some());
    assert_ne!(stored_ptr, original_ptr);
}

#[test]
fn allocations_are_charged_as_malloc_rounds_them() {
    assert_eq!(allocation(0), 0);
    // The smallest block, for one byte as for 24.
    assert_eq!(allocation(1), 32);
    assert_eq!(allocation(24), 32);
    assert_eq!(allocation(25), 48);
    // A mapping of its own, in whole pages, header included.
    assert_eq!(allocation(MMAP_THRESHOLD), MMAP_THRESHOLD + PAGE);
    assert_eq!(
        allocation(MMAP_THRESHOLD - 16 + PAGE),
        MMAP_THRESHOLD + PAGE
    );
}

#[test]
fn a_string_answer_is_held_in_one_buffer_and_charged_what_it_holds() {
    let elements = 40_000;
    let strings = vec![Bytes::from_static(b"x"); elements];
    let tensor = Tensor::strings(vec![elements], strings).unwrap_or_else(|e| panic!("{e}"));
    let store = ResponseStore::new(64 << 20);
    assert!(store.insert(1, key(1, "a"), &[("y".to_owned(), tensor)]));
    let stored = store.get(&key(1, "a")).unwrap_or_else(|| panic!("stored"));
    let strings = stored[0].1.string_elements().unwrap_or_default();
    assert_eq!(strings.len(), elements);
    assert!(strings.iter().all(|s| s == b"x"));
    // Packed: its elements are one buffer's bytes, not a handle each.
    assert!(strings.clone().into_handles().is_err());
    // The elements' bytes and an offset each, not 32 bytes of handle and a block each.
    let charged = store.usage().bytes;
    let packed = allocation(elements as u64) + allocation(8 * (elements as u64 + 1));
    assert_eq!(
        charged,
        ENTRY_OVERHEAD + allocation(1) + TENSOR_OVERHEAD + allocation(1) + allocation(8) + packed
    );
}
