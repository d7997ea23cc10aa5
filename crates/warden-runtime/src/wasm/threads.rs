//! The threads component calls run on, kept for the next call.
//!
//! Each call runs on a thread of its own so that the caller can stop waiting at
//! the deadline even when the guest is stuck in a host call (the thread is then
//! abandoned, as before). Starting a thread per call cost a `clone3`, a fresh
//! stack and its page faults, about a tenth of a warm call; a thread that
//! finishes goes back to an idle list instead, up to [`MAX_IDLE`] of them. A
//! thread whose call never returns never goes back, so an abandoned call cannot
//! hold up the next one.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

/// A call's work: computes the result and returns what delivers it.
pub(crate) type Job = Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send>;

/// The most idle threads kept.
const MAX_IDLE: usize = 16;

/// Idle call threads, each waiting for its next job.
#[derive(Debug, Default, Clone)]
pub(crate) struct CallThreads {
    idle: Arc<Mutex<Vec<Sender<Job>>>>,
}

impl CallThreads {
    /// Runs `job` on an idle thread, or on a new one when none is idle.
    pub(crate) fn run(&self, job: Job) -> std::io::Result<()> {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let job = match idle {
            Some(worker) => match worker.send(job) {
                Ok(()) => return Ok(()),
                // The thread is gone (it cannot be, short of a panic); start another.
                Err(e) => e.0,
            },
            None => job,
        };
        let (tx, rx) = channel();
        let idle = self.idle.clone();
        std::thread::Builder::new().name("warden-call".into()).spawn(move || work(job, &tx, &rx, &idle))?;
        Ok(())
    }
}

/// A call thread's life: run the job, go back to the idle list, deliver the
/// result (after going back, so the caller's next call finds this thread), and
/// wait for the next job. It ends when the list is full or the pool is dropped.
fn work(first: Job, me: &Sender<Job>, jobs: &Receiver<Job>, idle: &Mutex<Vec<Sender<Job>>>) {
    let mut job = first;
    loop {
        let deliver = job();
        let kept = {
            let mut idle = idle.lock().unwrap_or_else(PoisonError::into_inner);
            let keep = idle.len() < MAX_IDLE;
            if keep {
                idle.push(me.clone());
            }
            keep
        };
        deliver();
        if !kept {
            return;
        }
        match jobs.recv() {
            Ok(next) => job = next,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn on(threads: &CallThreads) -> std::thread::ThreadId {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        threads
            .run(Box::new(move || {
                let id = std::thread::current().id();
                Box::new(move || {
                    let _ = tx.send(id);
                })
            }))
            .unwrap();
        rx.recv().unwrap()
    }

    #[test]
    fn a_finished_thread_takes_the_next_call() {
        let threads = CallThreads::default();
        let first = on(&threads);
        assert_eq!(on(&threads), first);
        assert_ne!(first, std::thread::current().id());
    }

    #[test]
    fn a_stuck_call_does_not_hold_up_the_next() {
        let threads = CallThreads::default();
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        threads
            .run(Box::new(move || {
                let _ = stuck.recv();
                Box::new(|| {})
            }))
            .unwrap();
        // The stuck thread is not idle: this call gets another one, and returns.
        let other = on(&threads);
        assert_eq!(on(&threads), other);
        drop(release);
    }
}
