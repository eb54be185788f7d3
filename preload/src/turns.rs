//! The pinner thread's registration calls and the program's large copies take turns.
//!
//! While CUDA registers or unregisters host memory it holds a lock that every other CUDA call
//! of the process waits for, and while the program's large copies are being made, one such
//! call takes far longer than its size explains: on the H100, a 32 MiB registration beside a
//! thread copying 256 MiB at a time took 0.2-8.4 s (1.1 s median) and held every other call
//! of the program as long, against under 5 ms with no large copy in flight
//! (docs/benchmarks.md). Chunks cannot bound that; when the call is made can.
//!
//! So each call of the pinner thread (a chunk registered or unregistered) is made only while
//! none of the program's copies of at least [`LARGE`] host bytes is inside CUDA. It takes its
//! turn in rounds:
//! - it looks for such a moment without holding anything back, for up to [`POLITE`];
//! - then it holds back the large copies that come (they wait at [`copying`]) and waits for
//!   those inside CUDA to return, for up to [`HOLD`];
//! - if they have not, it lets the held copies go, rests (1 ms, doubling up to [`REST`]) and
//!   tries again: a call made beside a long copy was measured at 285-351 ms on the H100.
//!
//! Only after [`GIVE_UP`] without a turn does it make the call anyway (`calls_beside_copies`
//! in the report), so that a program that copies without pause, or a copy that waits on
//! the program's other threads, cannot hold the pinner for good.
//!
//! A held copy waits at most [`HOLD`] and one call made with no large copy beside it (one
//! made after [`GIVE_UP`], beside copies, may take longer); after [`LET_THROUGH`] it goes in
//! anyway, so that a call waiting on work that waits on the held thread cannot hang it.
//! After each call the pinner rests as long as the call took, so that a program thread
//! making several calls in a row (a small round trip is two) meets at most one of them.
//!
//! A copy is inside CUDA from its call until it returns, and, for a copy of memory registered
//! behind the program's back, until it is waited for; such a copy cut at chunk edges has
//! each piece waited for within its own turn (`chunks::in_pieces`). The program's
//! asynchronous copies of memory it pinned itself are not seen once queued: a call may still
//! be made while those are in flight.
//!
//! Only the pinner thread takes turns: a program thread that registers or unregisters (a
//! block of at most `HOTPIN_OFF_THREAD_ABOVE`, a part let go) makes its call at once.
//!
//! Where another thread copies 256 MiB back to back through the driver, the H100's calls
//! took 0.9-1.3 s without turns and 20-24 ms with them. But they are **off unless
//! `HOTPIN_BETWEEN_COPIES=1`**, because elsewhere (docs/benchmarks.md) they cost more than
//! they saved:
//! - a program that copies a hot tensor almost all the time leaves the pinner about one turn
//!   per copy, so letting a 16 GiB block go took the whole phase and the hot tensor's pin,
//!   queued behind it, never came (its copies 16 ms instead of 5);
//! - the program's asynchronous copies of memory it pinned itself are not seen once queued,
//!   and the pinner, put off until those were in flight, made registration calls of
//!   150-221 ms beside them, where calls made at once took about 10 ms.
//!
//! Seeing those copies (an event after each) and letting pins pass a long unregistration
//! would be the next steps.

use std::{
    cell::Cell,
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

/// Copies of at least this many host bytes take turns with the pinner's calls (the size floor
/// of the blocks auto mode tracks).
pub const LARGE: usize = 1 << 20;
/// How long the pinner thread looks for a moment with no large copy inside CUDA before it
/// holds new ones back.
const POLITE: Duration = Duration::from_millis(1);
/// How long it then holds them back, waiting for those inside CUDA to return.
const HOLD: Duration = Duration::from_millis(5);
/// The longest rest between two rounds that found no turn.
const REST: Duration = Duration::from_millis(32);
/// How long it looks for a turn before it makes its call anyway.
const GIVE_UP: Duration = Duration::from_secs(2);
/// The longest a copy is held back: then it goes in beside the call.
const LET_THROUGH: Duration = Duration::from_millis(100);
/// How often both sides look again.
const POLL: Duration = Duration::from_micros(20);

/// Whether turns are taken (`HOTPIN_BETWEEN_COPIES`, default off).
pub static ON: AtomicBool = AtomicBool::new(false);
/// Whether the pinner thread has started: before, no copy takes a turn.
static PINNER: AtomicBool = AtomicBool::new(false);
/// The program's large copies inside CUDA.
static COPYING: AtomicUsize = AtomicUsize::new(0);
/// Whether the pinner thread is making a call, or holding large copies back for one. Both
/// sides read what the other wrote (a store-buffer pattern): sequentially consistent.
static CALLING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Whether this thread is the pinner thread.
    static ON_PINNER: Cell<bool> = const { Cell::new(false) };
}

/// The longest a program's copy was held back (`longest_copy_held_ns`), the longest the pinner
/// waited for its turn (`longest_turn_wait_ns`), and how often a call and a large copy were
/// let beside each other: calls made after [`GIVE_UP`], copies let in after [`LET_THROUGH`]
/// (`calls_beside_copies`).
pub static LONGEST_HELD_NS: AtomicU64 = AtomicU64::new(0);
pub static LONGEST_TURN_WAIT_NS: AtomicU64 = AtomicU64::new(0);
pub static CALLS_BESIDE_COPIES: AtomicU64 = AtomicU64::new(0);

/// Whether turns are taken.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Marks the calling thread as the pinner thread: its calls take turns from now on.
pub fn pinner_thread() {
    ON_PINNER.with(|on| on.set(true));
    PINNER.store(true, Ordering::SeqCst);
}

/// A large copy inside CUDA, counted until dropped.
pub struct Copying(bool);

impl Drop for Copying {
    fn drop(&mut self) {
        if self.0 {
            COPYING.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Counts a copy of `bytes` host bytes as inside CUDA until the returned guard is dropped;
/// a large one waits first while the pinner thread makes (or is about to make) a call.
/// A copy held longer than [`LET_THROUGH`] (the pinner's call waiting on work that waits on
/// this thread, say) goes in anyway, beside the call (`calls_beside_copies`).
pub fn copying(bytes: usize) -> Copying {
    if bytes < LARGE || !PINNER.load(Ordering::SeqCst) || !ON.load(Ordering::Relaxed) {
        return Copying(false);
    }
    let mut held: Option<Instant> = None;
    loop {
        COPYING.fetch_add(1, Ordering::SeqCst);
        let let_through = held.is_some_and(|began| began.elapsed() >= LET_THROUGH);
        if !CALLING.load(Ordering::SeqCst) || let_through {
            if let Some(began) = held {
                LONGEST_HELD_NS.fetch_max(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            if let_through {
                CALLS_BESIDE_COPIES.fetch_add(1, Ordering::Relaxed);
            }
            return Copying(true);
        }
        COPYING.fetch_sub(1, Ordering::SeqCst);
        let began = *held.get_or_insert_with(Instant::now);
        while CALLING.load(Ordering::SeqCst) && began.elapsed() < LET_THROUGH {
            std::thread::sleep(POLL);
        }
    }
}

/// Makes the pinner thread's `call` in its turn: while none of the program's large copies is
/// inside CUDA (or once [`GIVE_UP`] has passed). On any other thread, at once.
pub fn in_turn<T>(call: impl FnOnce() -> T) -> T {
    if !ON_PINNER.with(Cell::get) || !ON.load(Ordering::Relaxed) {
        return call();
    }
    let began = Instant::now();
    let mut rest = Duration::from_millis(1);
    while !turn_taken() {
        if began.elapsed() >= GIVE_UP {
            // Called anyway, large copies held back meanwhile.
            CALLING.store(true, Ordering::SeqCst);
            CALLS_BESIDE_COPIES.fetch_add(1, Ordering::Relaxed);
            break;
        }
        std::thread::sleep(rest);
        rest = (rest * 2).min(REST);
    }
    LONGEST_TURN_WAIT_NS.fetch_max(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
    let calling = Instant::now();
    let answer = {
        let _turn = Turn;
        call()
    };
    // As long again for the program: a thread that makes several calls in a row (a small
    // round trip is two) meets at most one of ours.
    std::thread::sleep(calling.elapsed());
    answer
}

/// One round of looking for a turn: true with `CALLING` set and no large copy inside CUDA;
/// else false, with nothing held back.
fn turn_taken() -> bool {
    let began = Instant::now();
    loop {
        CALLING.store(true, Ordering::SeqCst);
        if COPYING.load(Ordering::SeqCst) == 0 {
            return true;
        }
        if began.elapsed() >= POLITE {
            break;
        }
        CALLING.store(false, Ordering::SeqCst);
        std::thread::sleep(POLL);
    }
    // Large copies are held back from now on; those inside CUDA are waited for.
    while began.elapsed() < POLITE + HOLD {
        if COPYING.load(Ordering::SeqCst) == 0 {
            return true;
        }
        std::thread::sleep(POLL);
    }
    CALLING.store(false, Ordering::SeqCst);
    false
}

/// The pinner thread's turn: ends when dropped, even if its call panicked.
struct Turn;

impl Drop for Turn {
    fn drop(&mut self) {
        CALLING.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier, mpsc};

    /// The pinner's call waits for a large copy inside CUDA (or, past its limit, is counted
    /// as made beside it), and a large copy that comes during the call waits for it to end;
    /// a small copy does neither.
    #[test]
    fn the_pinners_calls_and_large_copies_take_turns() {
        static IN_CALL: AtomicBool = AtomicBool::new(false);
        static COPY_INSIDE: AtomicBool = AtomicBool::new(false);
        PINNER.store(true, Ordering::SeqCst);
        ON.store(true, Ordering::SeqCst);
        // A large copy inside CUDA for 5 ms.
        let inside = Arc::new(Barrier::new(2));
        let copier = {
            let inside = Arc::clone(&inside);
            std::thread::spawn(move || {
                let copying = copying(LARGE);
                COPY_INSIDE.store(true, Ordering::SeqCst);
                inside.wait();
                std::thread::sleep(Duration::from_millis(5));
                COPY_INSIDE.store(false, Ordering::SeqCst);
                drop(copying);
            })
        };
        inside.wait();
        let pinner = std::thread::spawn(|| {
            pinner_thread();
            in_turn(|| {
                let beside = COPY_INSIDE.load(Ordering::SeqCst);
                IN_CALL.store(true, Ordering::SeqCst);
                // A copy that comes now: a small one gets through during the call, a large
                // one waits for its end.
                let (small_through, told) = mpsc::channel();
                let late = std::thread::spawn(move || {
                    drop(copying(LARGE - 1));
                    small_through.send(()).expect("the call waits for this");
                    let _large = copying(LARGE);
                    IN_CALL.load(Ordering::SeqCst)
                });
                let small = told.recv_timeout(Duration::from_secs(10)).is_ok();
                std::thread::sleep(Duration::from_millis(20));
                IN_CALL.store(false, Ordering::SeqCst);
                (beside, small, late)
            })
        });
        copier.join().expect("the copier");
        let (beside, small, late) = pinner.join().expect("the pinner");
        assert!(small, "a small copy got through during the call");
        assert!(
            !late.join().expect("the late copy"),
            "a large copy waited for the call"
        );
        assert!(
            !beside || CALLS_BESIDE_COPIES.load(Ordering::SeqCst) > 0,
            "a call beside a copy only once the pinner waited its limit, and counted"
        );
    }
}
