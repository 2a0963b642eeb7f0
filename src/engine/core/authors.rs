//! Who changed each tracked item last, as the core keeps it until the stamps
//! carrying the change are written (design §5c).
//!
//! [`Authors`] keeps one entry per tracked item whose change a workload still
//! has to write (a first report counts: at start-up, every tracked item, until
//! the initial stamps are written). A source's [`Provenance`] is a box of
//! three optional strings, four allocations; kept packed, it is one.

use std::collections::HashMap;

use crate::model::{Reference, StampSpec, Tracked};
use crate::outcome::history::Change;
use crate::sources::Provenance;

/// Who changed each tracked item last, for items that changed while tracked
/// (a rollout names them), until no stamp still has to carry the change.
#[derive(Debug, Default)]
pub(super) struct Authors(HashMap<Tracked, PackedProvenance>);

impl Authors {
    /// `tracked` was changed as `provenance` says.
    pub(super) fn changed(&mut self, tracked: &Tracked, provenance: &Provenance) {
        self.0
            .insert(tracked.clone(), PackedProvenance::pack(provenance));
    }

    /// `reference` as a rollout names it (its tracked items are `specs`'
    /// inputs): with who changed it last, when a source said so.
    pub(super) fn change_of(&self, reference: &Reference, specs: &[StampSpec]) -> Change {
        let known = specs
            .iter()
            .flat_map(|spec| &spec.inputs)
            .filter(|input| input.tracked.reference == *reference)
            .find_map(|input| self.0.get(&input.tracked))
            .map(PackedProvenance::unpack)
            .unwrap_or_default();
        Change {
            reference: reference.to_string(),
            version: known.version,
            by: known.changed_by,
            at: known.changed_at,
        }
    }

    /// Forgets who changed `tracked`.
    pub(super) fn forget(&mut self, tracked: &Tracked) {
        self.0.remove(tracked);
    }

    /// Forgets who changed each of `named` that no workload still has to
    /// write (`needed`). At xl, 44,000 items' authors (~3 MB) were kept after
    /// every stamp naming them was written. A later change reported without an
    /// author names none, not the previous change's author.
    pub(super) fn release(&mut self, named: Vec<Tracked>, needed: impl Fn(&Tracked) -> bool) {
        for tracked in named {
            if !needed(&tracked) {
                self.0.remove(&tracked);
            }
        }
        // Most are released after the initial stamps: give the room back.
        let capacity = self.0.capacity();
        if capacity > 64 && self.0.len() * 4 < capacity {
            self.0.shrink_to(self.0.len() * 2);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

/// A [`Provenance`] in one allocation: each part, in order (version, author,
/// time), as `-` when absent or `+<length>:<text>` (lengths in bytes), so any
/// text packs and unpacks unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PackedProvenance(Box<str>);

impl PackedProvenance {
    /// Packs `provenance`.
    fn pack(provenance: &Provenance) -> Self {
        let parts = [
            &provenance.version,
            &provenance.changed_by,
            &provenance.changed_at,
        ];
        let mut packed = String::new();
        for part in parts {
            match part {
                Some(text) => {
                    packed.push('+');
                    packed.push_str(&text.len().to_string());
                    packed.push(':');
                    packed.push_str(text);
                }
                None => packed.push('-'),
            }
        }
        Self(packed.into_boxed_str())
    }

    /// The provenance as packed.
    fn unpack(&self) -> Provenance {
        let mut rest: &str = &self.0;
        let mut parts: [Option<String>; 3] = Default::default();
        for part in &mut parts {
            if let Some(tail) = rest.strip_prefix('-') {
                rest = tail;
                continue;
            }
            let Some((text, tail)) = take(rest) else {
                break;
            };
            *part = Some(text.to_owned());
            rest = tail;
        }
        let [version, changed_by, changed_at] = parts;
        Provenance {
            version,
            changed_by,
            changed_at,
        }
    }
}

/// The text of the part `packed` starts with (`+<length>:<text>`), and what
/// follows it.
fn take(packed: &str) -> Option<(&str, &str)> {
    let tail = packed.strip_prefix('+')?;
    let (length, tail) = tail.split_once(':')?;
    let length: usize = length.parse().ok()?;
    Some((tail.get(..length)?, tail.get(length..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(provenance: Provenance) {
        let packed = PackedProvenance::pack(&provenance);
        assert_eq!(packed.unpack(), provenance, "packed as {:?}", packed.0);
    }

    #[test]
    fn every_part_comes_back_as_it_was_given() {
        round_trip(Provenance::default());
        round_trip(Provenance::version("81234"));
        round_trip(
            Provenance::version("81234")
                .changed_by("kubectl-edit", Some("2026-11-25T13:02:11Z".into())),
        );
        round_trip(Provenance {
            version: None,
            changed_by: Some("helm".into()),
            changed_at: None,
        });
    }

    #[test]
    fn text_that_looks_like_the_packing_comes_back_unchanged() {
        round_trip(Provenance {
            version: Some("+3:-".into()),
            changed_by: Some("-".into()),
            changed_at: Some("ünïcode: 12:00 +01:00".into()),
        });
        round_trip(Provenance {
            version: Some(String::new()),
            changed_by: None,
            changed_at: Some("+".into()),
        });
    }

    #[test]
    fn a_packed_provenance_is_one_allocation_of_its_text() {
        let packed = PackedProvenance::pack(
            &Provenance::version("81234")
                .changed_by("kubectl-edit", Some("2026-11-25T13:02:11Z".into())),
        );
        assert_eq!(
            &*packed.0,
            "+5:81234+12:kubectl-edit+20:2026-11-25T13:02:11Z"
        );
    }
}
