//! Buffers a worker keeps for reuse: a buffer too large for the allocator's
//! thread cache costs an arena allocation and free (a few thousand
//! instructions) each time it is made anew, so the ones given back are kept,
//! up to a bound, for the next user on the same thread. What a whole period
//! between two [`Spares::trim`] calls left untaken is let go, so a burst's
//! buffers do not stay with an idle worker.

use std::cell::{Cell, RefCell};

/// At most `max` kept values, in a thread-local:
/// `thread_local! { static S: Spares<Vec<u8>> = const { Spares::new(4) } }`.
pub struct Spares<T> {
    kept: RefCell<Vec<T>>,
    /// The fewest kept since the last trim: that many went unused.
    low: Cell<usize>,
    max: usize,
}

impl<T> Spares<T> {
    pub const fn new(max: usize) -> Self {
        Spares {
            kept: RefCell::new(Vec::new()),
            low: Cell::new(0),
            max,
        }
    }

    /// The value kept last, if any.
    pub fn take(&self) -> Option<T> {
        let mut kept = self.kept.borrow_mut();
        let v = kept.pop();
        self.low.set(self.low.get().min(kept.len()));
        v
    }

    /// The last kept value that `ready` accepts (it may change the value as
    /// it looks, e.g. reclaim a buffer whose slices are gone), if any.
    pub fn take_if(&self, mut ready: impl FnMut(&mut T) -> bool) -> Option<T> {
        let mut kept = self.kept.borrow_mut();
        let i = kept.iter_mut().rposition(&mut ready)?;
        let v = kept.remove(i);
        self.low.set(self.low.get().min(kept.len()));
        Some(v)
    }

    /// Keep `v` for a later `take`, unless `max` are kept already.
    pub fn keep(&self, v: T) {
        let mut kept = self.kept.borrow_mut();
        if kept.len() < self.max {
            kept.push(v);
        }
    }

    /// Let go of the values no `take` needed since the last trim (the
    /// oldest kept).
    pub fn trim(&self) {
        let mut kept = self.kept.borrow_mut();
        let unused = self.low.get().min(kept.len());
        kept.drain(..unused);
        self.low.set(kept.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_up_to_the_bound() {
        let s = Spares::new(2);
        for v in [1, 2, 3] {
            s.keep(v);
        }
        assert_eq!(s.take(), Some(2));
        assert_eq!(s.take(), Some(1));
        assert_eq!(s.take(), None);
    }

    #[test]
    fn take_if_skips_what_is_not_ready() {
        let s = Spares::new(4);
        for v in [1, 2, 3] {
            s.keep(v);
        }
        assert_eq!(s.take_if(|v| *v % 2 == 0), Some(2));
        assert_eq!(s.take_if(|v| *v % 2 == 0), None);
        assert_eq!(s.take(), Some(3));
    }

    #[test]
    fn trim_lets_go_of_what_went_unused() {
        let s = Spares::new(8);
        for v in 0..4 {
            s.keep(v);
        }
        // Kept since before the first trim: not counted as unused yet.
        s.trim();
        assert_eq!(s.kept.borrow().len(), 4);
        // One taken and given back: three went unused the whole period.
        let v = s.take().unwrap();
        s.keep(v);
        s.trim();
        assert_eq!(s.kept.borrow().len(), 1);
        s.trim();
        assert_eq!(s.kept.borrow().len(), 0);
    }
}
