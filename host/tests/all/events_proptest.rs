//! Property: whatever random damage a log suffers, replay never panics and
//! never invents an event. It either refuses with a typed error or returns
//! a prefix of what was written.

use crate::support::events::{events_of, one_of_each, write_attempt};
use coordhost::events::{EventsError, JobEvent, MemoryStorage, replay};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, mask: u8 },
    Truncate { at: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Overwrite { at: usize, bytes: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Overwrite { at, bytes }),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match mutation {
        Mutation::Flip { at, mask } => {
            let i = at % bytes.len();
            bytes[i] ^= mask;
        }
        Mutation::Truncate { at } => bytes.truncate(at % bytes.len()),
        Mutation::Insert { at, bytes: new } => {
            let i = at % bytes.len();
            bytes.splice(i..i, new.iter().copied());
        }
        Mutation::Overwrite { at, bytes: new } => {
            let i = at % bytes.len();
            for (j, b) in new.iter().enumerate() {
                if let Some(slot) = bytes.get_mut(i + j) {
                    *slot = *b;
                }
            }
        }
    }
}

/// Events 0..n of a fixed sequence cycling through every kind.
fn events(n: usize) -> Vec<JobEvent> {
    one_of_each().into_iter().cycle().take(n).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn random_damage_never_yields_an_event_that_was_not_written(
        first in 0usize..12,
        second in 0usize..12,
        damage_older in any::<bool>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let storage = MemoryStorage::new();
        let all = events(first + second);
        write_attempt(&storage, &all[..first]);
        write_attempt(&storage, &all[first..]);
        let target = if damage_older { 0 } else { 1 };
        let mut bytes = storage.written(target);
        for m in &mutations {
            apply(&mut bytes, m);
        }
        storage.put_segment(target, bytes);
        match replay(&storage) {
            Ok(replayed) => {
                let got = events_of(&replayed);
                prop_assert!(got.len() <= all.len());
                prop_assert_eq!(&got[..], &all[..got.len()]);
                if damage_older {
                    // A sealed segment is never cut: it is whole or refused.
                    prop_assert_eq!(got.len(), all.len());
                }
            }
            Err(
                EventsError::Corrupt { .. }
                | EventsError::UnsupportedFormat { .. }
                | EventsError::UnsupportedVersion { .. }
                | EventsError::UnknownKind { .. },
            ) => {}
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }
}
