//! Opaque handles as ids in per-type tables.
//!
//! A handle given to C is an id, not an address: it is never dereferenced. Calls look the id up
//! and get a shared reference to the object, so a freed, closed or foreign handle is answered
//! with `FERROLOCK_RESULT_CLOSED` instead of undefined behaviour, and a handle freed while another
//! thread is inside a call on it stays alive until that call returns. Ids come from one counter
//! for every type and are never reused, so a handle of one type is never found in another table.
//!
//! Handles belong to the process that made them. After `fork()` the child's calls on a handle
//! made in the parent get `FERROLOCK_RESULT_CLOSED` (its connections, watchdog and runtime are
//! the parent's: used from the child they would steal the parent's replies and release its
//! locks), and freeing it there leaves it in the table, untouched: none of its cleanup runs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ferrolock::{Error, ErrorKind};

/// Ids start high and step by 16, so they look like aligned addresses and are never NULL.
static NEXT_ID: AtomicUsize = AtomicUsize::new(0x1_0000);

// With 32-bit ids the counter would wrap after 2^28 handles (a month of 100 acquires a second):
// to NULL, then to the ids of live or freed handles. 64 bits never wrap.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("ferrolock's C API needs a 64-bit target: its handle ids must never be reused");

/// The live objects of one handle type.
pub(crate) struct Table<T> {
    what: &'static str,
    /// id → (the process that made it, the object).
    map: Mutex<BTreeMap<usize, (u32, Arc<T>)>>,
}

impl<T> Table<T> {
    pub(crate) const fn new(what: &'static str) -> Self {
        Table { what, map: Mutex::new(BTreeMap::new()) }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, (u32, Arc<T>)>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Store `value` and return its handle.
    pub(crate) fn insert<H>(&self, value: T) -> *mut H {
        let id = NEXT_ID.fetch_add(16, Ordering::Relaxed);
        self.map().insert(id, (ferrolock::driver::process_id(), Arc::new(value)));
        std::ptr::without_provenance_mut(id)
    }

    /// The object behind `handle`: `NULL_ARGUMENT` for NULL, `CLOSED` for a freed or unknown one.
    pub(crate) fn get<H>(&self, handle: *const H) -> Result<Arc<T>, Error> {
        if handle.is_null() {
            return Err(Error::new(ErrorKind::NullArgument, format!("the {} handle is NULL", self.what)));
        }
        match self.map().get(&handle.addr()) {
            Some((pid, value)) if *pid == ferrolock::driver::process_id() => Ok(value.clone()),
            Some(_) => Err(Error::new(
                ErrorKind::Closed,
                format!(
                    "the {} handle was made by the parent process before fork(): make new handles in the child",
                    self.what
                ),
            )),
            None => Err(Error::new(
                ErrorKind::Closed,
                format!("the {} handle was freed or is not a {0} handle", self.what),
            )),
        }
    }

    /// Forget `handle` (no-op for NULL or an unknown handle). The object is dropped when the last
    /// call using it returns, outside the table's lock.
    pub(crate) fn remove<H>(&self, handle: *const H) {
        if handle.is_null() {
            return;
        }
        let mut map = self.map();
        if map.get(&handle.addr()).is_some_and(|(pid, _)| *pid != ferrolock::driver::process_id()) {
            return; // the parent's object: its cleanup would act on the parent's connections
        }
        let removed = map.remove(&handle.addr());
        drop(map);
        drop(removed);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    struct Opaque;

    #[test]
    fn handles_are_ids_checked_on_every_use() {
        static A: Table<u32> = Table::new("a");
        static B: Table<u32> = Table::new("b");
        let h: *mut Opaque = A.insert(7);
        let other: *mut Opaque = B.insert(8);
        assert_ne!(h.addr(), other.addr());
        assert_eq!(*A.get(h).unwrap(), 7);
        // A handle of another table, NULL, and a freed handle are refused, never dereferenced.
        assert_eq!(A.get(other).unwrap_err().kind(), ErrorKind::Closed);
        assert_eq!(A.get(std::ptr::null::<Opaque>()).unwrap_err().kind(), ErrorKind::NullArgument);
        let held = A.get(h).unwrap();
        A.remove(h);
        A.remove(h); // double free: no-op
        assert_eq!(A.get(h).unwrap_err().kind(), ErrorKind::Closed);
        assert_eq!(*held, 7); // a call in flight keeps its object alive
        B.remove(other);
    }
}
