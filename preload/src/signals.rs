//! What was learned survives the signals that end training jobs (#41 item 11): SIGTERM from a
//! scheduler, SIGINT (Ctrl-C, and CPython's exit after an unhandled `KeyboardInterrupt`,
//! which kills itself with SIGINT once finalised), SIGHUP. Ended so, a process runs no
//! `atexit` handler, so auto mode wrote nothing it learned, and no `--report`.
//!
//! - A signal the program left at its default action gets a handler of ours at load, which
//!   only writes the signal's number to a pipe (all a handler may safely do). A thread of
//!   ours reads it, writes what was learned and the report (taking the state's lock like
//!   any thread: the thread the signal interrupted goes on meanwhile), then puts the default
//!   action back and sends the signal again: the process ends as it would have, by that
//!   signal, its exit status unchanged.
//! - The program is never shown that handler: `sigaction` and `signal` answer the default
//!   action while it is ours, and once the program sets its own, ours is gone.
//! - A process that sends itself one of these signals at their default action (`kill`,
//!   `raise`: CPython after `KeyboardInterrupt`, a handler that cleans up then re-raises)
//!   has what was learned written first.

use std::{
    ffi::c_int,
    sync::{
        OnceLock,
        atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering},
    },
};

/// The signals handled so.
const SIGNALS: [c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// The pipe from the handler to the thread: (read end, write end); -1 when not made.
static READ_END: AtomicI32 = AtomicI32::new(-1);
static WRITE_END: AtomicI32 = AtomicI32::new(-1);
/// Whether our handler is the action of each of [`SIGNALS`] now.
static OURS: [AtomicBool; 3] = [
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
];
/// The process whose thread reads the pipe: a forked child shares the pipe, not the thread.
static OWNER: AtomicI32 = AtomicI32::new(0);
/// What writes what was learned, and the report (given by `state` at [`init`]).
static WRITE_WHAT_WAS_LEARNED: OnceLock<fn()> = OnceLock::new();

/// Writes what was learned, once (the writer keeps it to once).
fn write_what_was_learned() {
    if let Some(write) = WRITE_WHAT_WAS_LEARNED.get() {
        write();
    }
}

/// Whether this is a forked child of the process that set the handlers up.
fn forked_child() -> bool {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() != OWNER.load(Ordering::Relaxed) }
}
/// libc's `sigaction` and `signal`, once looked up.
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);

type Sigaction = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type Signal = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// Whether our handler is `signal`'s action (None: not one of [`SIGNALS`]).
fn ours(signal: c_int) -> Option<&'static AtomicBool> {
    SIGNALS
        .iter()
        .position(|&s| s == signal)
        .and_then(|i| OURS.get(i))
}

/// libc's function `name`, looked up once (at load, or at the first call that needs it, which
/// may come before our load-time code ran) and kept in `cache`.
fn real(cache: &AtomicUsize, name: &std::ffi::CStr) -> Option<usize> {
    let known = cache.load(Ordering::Acquire);
    if known != 0 {
        return Some(known);
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    cache.store(found, Ordering::Release);
    (found != 0).then_some(found)
}

fn real_sigaction() -> Option<Sigaction> {
    let address = real(&REAL_SIGACTION, c"sigaction")?;
    // SAFETY: libc's sigaction, of this type, looked up by name.
    Some(unsafe { std::mem::transmute::<usize, Sigaction>(address) })
}

/// At load, where something is to be written at exit: the pipe, the thread that reads it,
/// and our handler for each of [`SIGNALS`] the program left at its default action; `write`
/// writes what was learned, before a signal ends the process.
pub fn init(write: fn()) {
    let _ = WRITE_WHAT_WAS_LEARNED.set(write);
    let Some(sigaction) = real_sigaction() else {
        return;
    };
    let mut ends = [0; 2];
    // SAFETY: an out-array of two descriptors.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    READ_END.store(ends[0], Ordering::Release);
    WRITE_END.store(ends[1], Ordering::Release);
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() }, Ordering::Release);
    let spawned = std::thread::Builder::new()
        .name("hotpin-signals".into())
        .spawn(watch);
    if spawned.is_err() {
        return;
    }
    for (&signal, flag) in SIGNALS.iter().zip(&OURS) {
        // SAFETY: zeroed sigaction structs are valid; the query and the install are as
        // sigaction(2) documents.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if sigaction(signal, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = handler as extern "C" fn(c_int) as usize;
            ours.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut ours.sa_mask);
            if sigaction(signal, &ours, std::ptr::null_mut()) == 0 {
                flag.store(true, Ordering::Release);
            }
        }
    }
}

/// Blocks every signal on the calling thread, one of hotpin's own: a signal sent to the
/// process is then delivered to one of the program's threads, as without hotpin, never to
/// ours (a program that blocks SIGTERM in every thread and takes it with `sigwait` or a
/// `signalfd` would otherwise have it delivered to our thread, and handled by its action).
pub fn block_all_on_this_thread() {
    // SAFETY: a local signal set filled, then the calling thread's mask set from it.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// Our handler: the signal's number down the pipe, nothing else. In a forked child (whose
/// parent's thread reads the pipe), the default action at once, as the child would have had.
extern "C" fn handler(signal: c_int) {
    // SAFETY: getpid, sigaction and kill are async-signal-safe system calls.
    unsafe {
        if libc::getpid() != OWNER.load(Ordering::Relaxed) {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                &raw const default,
                std::ptr::null_mut::<libc::sigaction>(),
                std::mem::size_of::<libc::sigset_t>(),
            );
            libc::syscall(libc::SYS_kill, libc::getpid(), signal);
            return;
        }
    }
    let byte = signal as u8;
    // SAFETY: write(2) is async-signal-safe; one byte from a local.
    unsafe {
        libc::write(
            WRITE_END.load(Ordering::Relaxed),
            (&raw const byte).cast(),
            1,
        )
    };
}

/// In a forked child: each signal whose action is ours gets the default action back (the
/// child writes nothing at exit, and the pipe's reader is its parent's thread).
pub fn forked() {
    for &signal in &SIGNALS {
        put_default_back(signal);
    }
}

/// The thread: for each signal read, what was learned is written, the default action put
/// back and the signal sent again.
fn watch() {
    block_all_on_this_thread();
    let read_end = READ_END.load(Ordering::Acquire);
    loop {
        let mut byte = 0u8;
        // SAFETY: one byte into a local.
        let n = unsafe { libc::read(read_end, (&raw mut byte).cast(), 1) };
        if n == 1 {
            let signal = c_int::from(byte);
            write_what_was_learned();
            put_default_back(signal);
            // SAFETY: kill has no memory preconditions: this process, the signal it got.
            unsafe { libc::syscall(libc::SYS_kill, libc::getpid(), signal) };
        } else if n == 0
            || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
        {
            return;
        }
    }
}

/// The default action again for `signal`, where ours was its action.
fn put_default_back(signal: c_int) {
    if !ours(signal).is_some_and(|flag| flag.swap(false, Ordering::AcqRel)) {
        return;
    }
    if let Some(sigaction) = real_sigaction() {
        // SAFETY: a zeroed sigaction with SIG_DFL is valid.
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            sigaction(signal, &default, std::ptr::null_mut());
        }
    }
}

/// Whether `signal`, sent to this process now, would end it by its default action (ours
/// stands for it).
fn ends_the_process(signal: c_int) -> bool {
    let Some(flag) = ours(signal) else {
        return false;
    };
    if flag.load(Ordering::Acquire) {
        return true;
    }
    let Some(sigaction) = real_sigaction() else {
        return false;
    };
    // SAFETY: a query into a zeroed local.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        sigaction(signal, std::ptr::null(), &mut now) == 0 && now.sa_sigaction == libc::SIG_DFL
    }
}

/// Before this process sends itself `signal`: written first if it ends the process.
fn before_sending_self(signal: c_int) {
    if !forked_child() && ends_the_process(signal) {
        write_what_was_learned();
        put_default_back(signal);
    }
}

/// `kill`: one sent to this process that ends it has what was learned written first.
///
/// # Safety
/// As kill(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kill(pid: libc::pid_t, signal: c_int) -> c_int {
    // SAFETY: getpid has no preconditions.
    if pid == unsafe { libc::getpid() } {
        before_sending_self(signal);
    }
    // SAFETY: the system call kill(2) is.
    unsafe { libc::syscall(libc::SYS_kill, pid, signal) as c_int }
}

/// `raise`: likewise.
///
/// # Safety
/// As raise(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn raise(signal: c_int) -> c_int {
    before_sending_self(signal);
    // SAFETY: tgkill to the calling thread, as glibc's raise does.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            libc::syscall(libc::SYS_gettid),
            signal,
        ) as c_int
    }
}

/// `sigaction`: our handler is shown as the default action; once the program sets its own,
/// ours is gone.
///
/// # Safety
/// As sigaction(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    signal: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(real) = real_sigaction() else {
        return -1;
    };
    let flag = ours(signal);
    let was_ours = flag.is_some_and(|f| f.load(Ordering::Acquire));
    // SAFETY: as the caller promises.
    let rc = unsafe { real(signal, act, old) };
    if rc == 0 && was_ours {
        if !old.is_null() {
            // SAFETY: the caller's out-pointer, just written.
            unsafe {
                (*old).sa_sigaction = libc::SIG_DFL;
                (*old).sa_flags = 0;
                libc::sigemptyset(&mut (*old).sa_mask);
            }
        }
        if !act.is_null()
            && let Some(flag) = flag
        {
            flag.store(false, Ordering::Release);
        }
    }
    rc
}

/// `signal`: as [`sigaction`].
///
/// # Safety
/// As signal(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(signal: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    let Some(address) = real(&REAL_SIGNAL, c"signal") else {
        return libc::SIG_ERR;
    };
    // SAFETY: libc's signal, of this type, looked up by name.
    let real = unsafe { std::mem::transmute::<usize, Signal>(address) };
    let was_ours = ours(signal).is_some_and(|f| f.swap(false, Ordering::AcqRel));
    // SAFETY: as the caller promises.
    let old = unsafe { real(signal, handler) };
    if was_ours && old != libc::SIG_ERR {
        return libc::SIG_DFL;
    }
    old
}
