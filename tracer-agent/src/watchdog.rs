//! A process of its own that lets held programs go when the agent stops answering (#41 item
//! 3): a program the kernel side stopped on a library open waits for the agent's SIGCONT,
//! and an agent that is itself stopped (SIGSTOP, a debugger), hung or killed would leave it
//! stopped for good. The watchdog, forked from the agent, keeps only the two maps it needs
//! (the held processes and the settings, with the agent's heartbeat) and looks every
//! [`LOOK_EVERY`]: once the heartbeat is [`HOLD_LIMIT_NS`] old, or the agent is gone, it takes
//! every held process out and continues it (and the parents its stop stopped, as the agent
//! does); gone, it exits. A stopped agent that is continued later finds its programs running,
//! their first calls untraced: a program is never frozen for a tracer.
//!
//! It is forked from a process with threads, so it uses system calls only: no allocation, no
//! lock.

use std::os::fd::RawFd;

use tracer_common::config;

/// A heartbeat this old lets every held program go.
pub const HOLD_LIMIT_NS: u64 = 2_000_000_000;
/// How often the watchdog looks.
const LOOK_EVERY: libc::timespec = libc::timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};
/// Held processes let go per look, at most (the map holds up to `MAX_TARGETS`).
const BATCH: usize = 1024;

/// The watchdog process, killed and reaped when dropped.
#[derive(Debug)]
pub struct Watchdog {
    pid: libc::pid_t,
}

impl Watchdog {
    /// Forks the watchdog over the held-process map `held` and the settings array `settings`.
    pub fn start(held: RawFd, settings: RawFd) -> std::io::Result<Self> {
        // SAFETY: getpid has no preconditions.
        let agent = unsafe { libc::getpid() };
        // SAFETY: the child runs `watch`, which makes system calls only, and never returns.
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error()),
            // SAFETY: in the forked child, as `watch` requires.
            0 => unsafe { watch(agent, held, settings) },
            pid => Ok(Self { pid }),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // SAFETY: the watchdog is this process's child, not yet reaped.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The watchdog's life. Safety: only in the child of a fork, which it never returns from.
unsafe fn watch(agent: libc::pid_t, held: RawFd, settings: RawFd) -> ! {
    // SAFETY: system calls on this process's own state and descriptors.
    unsafe {
        // Its own session: a terminal's ^C or ^Z for the agent's job does not reach it.
        libc::setsid();
        libc::prctl(libc::PR_SET_NAME, c"tracer-holds".as_ptr());
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for signal in 1..32 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        // Only the two maps stay open: the programs' links and everything else the agent
        // holds must close with the agent.
        let held = libc::fcntl(held, libc::F_DUPFD_CLOEXEC, 1000);
        let settings = libc::fcntl(settings, libc::F_DUPFD_CLOEXEC, held + 1);
        if held < 0 || settings < 0 {
            libc::_exit(1);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        close_from_to(3, held - 1);
        close_from_to(held + 1, settings - 1);
        close_from_to(settings + 1, libc::c_int::MAX);
        loop {
            libc::nanosleep(&LOOK_EVERY, std::ptr::null_mut());
            let gone = libc::getppid() != agent;
            let stale = heartbeat(settings).is_none_or(|beat| {
                crate::address_space::monotonic_ns().saturating_sub(beat) >= HOLD_LIMIT_NS
            });
            if gone || stale {
                let_all_go(held);
            }
            if gone {
                libc::_exit(0);
            }
        }
    }
}

/// Closes descriptors `first..=last` (none where `first > last`).
unsafe fn close_from_to(first: libc::c_int, last: libc::c_int) {
    if first > last {
        return;
    }
    // SAFETY: closing descriptors of this process.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first as u32, last as u32, 0) == 0 {
            return;
        }
        // Before Linux 5.9: one at a time, up to the open-file limit.
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        let end = (limit.rlim_cur.min(1 << 20) as libc::c_int).min(last);
        for fd in first..=end {
            libc::close(fd);
        }
    }
}

/// `union bpf_attr` for the map element commands.
#[repr(C)]
struct ElementAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value_or_next_key: u64,
    flags: u64,
}

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;

/// One map element command; whether it succeeded.
fn element(command: libc::c_long, map: RawFd, key: u64, value: u64) -> bool {
    let attr = ElementAttr {
        map_fd: map as u32,
        _pad: 0,
        key,
        value_or_next_key: value,
        flags: 0,
    };
    // SAFETY: `attr` is a valid bpf_attr prefix for these commands; `key` and `value` point
    // at buffers of the map's key and value sizes, or are 0 where the command allows it.
    unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            &attr as *const ElementAttr,
            std::mem::size_of::<ElementAttr>(),
        ) == 0
    }
}

/// The agent's last heartbeat (`config::HEARTBEAT_NS`).
fn heartbeat(settings: RawFd) -> Option<u64> {
    let index: u32 = config::HEARTBEAT_NS;
    let mut beat: u64 = 0;
    element(
        BPF_MAP_LOOKUP_ELEM,
        settings,
        &index as *const u32 as u64,
        &mut beat as *mut u64 as u64,
    )
    .then_some(beat)
}

/// Takes every held process out and continues it, with the parents its stop stopped.
fn let_all_go(held: RawFd) {
    let mut pids = [0u32; BATCH];
    let mut count = 0;
    let mut next: u32 = 0;
    // The first key (key 0: none given), then each after the last.
    let mut key = 0u64;
    while count < BATCH
        && element(
            BPF_MAP_GET_NEXT_KEY,
            held,
            key,
            &mut next as *mut u32 as u64,
        )
    {
        pids[count] = next;
        count += 1;
        key = &pids[count - 1] as *const u32 as u64;
    }
    for &pid in &pids[..count] {
        element(BPF_MAP_DELETE_ELEM, held, &pid as *const u32 as u64, 0);
        let mut at = pid;
        for _ in 0..crate::hold::DEPTH {
            match crate::hold::state_and_parent(at) {
                Some((state, parent)) if parent > 1 => {
                    if state == b'T' {
                        // SAFETY: kill has no memory preconditions.
                        unsafe { libc::kill(parent as i32, libc::SIGCONT) };
                    }
                    at = parent;
                }
                _ => break,
            }
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    }
}
