//! vtrace as a library: [`Recorder`] starts a recording on a thread of its
//! own and stops it when the embedding program says so.

use super::{
    RecordOptions,
    preflight::preflight,
    run::{RecordOutcome, run},
    session::{Control, runtime},
};
use crate::{Error, Result};

/// The recorder thread's name (15 characters: a thread's comm holds no more).
const RECORDER_THREAD: &str = "vtrace-recorder";

/// A recording started and stopped by another program (no signal handlers
/// installed, no command needed): `Recorder::start(opts)?`, run the code to
/// measure, then `recorder.stop()?` returns the recording.
pub struct Recorder {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<RecordOutcome>>>,
}

impl Recorder {
    /// Returns once every probe is attached: what runs after it is recorded.
    /// An error before that (privileges, a probe the CPU layer cannot do
    /// without) is returned as the command line would report it.
    pub fn start(opts: RecordOptions) -> Result<Recorder> {
        Self::start_with(opts, Some(RECORDER_THREAD))
    }

    /// As [`Recorder::start`], from vtrace's own program (`vtrace bench`):
    /// every thread of this process, and every helper it runs that is not
    /// the workload, is vtrace's, not the recorder's threads only.
    pub fn start_in_vtrace(opts: RecordOptions) -> Result<Recorder> {
        Self::start_with(opts, None)
    }

    fn start_with(opts: RecordOptions, own_threads: Option<&'static str>) -> Result<Recorder> {
        let prepared = preflight(&opts)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (attached_tx, attached_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(RECORDER_THREAD.into())
            .spawn(move || {
                let control = Control {
                    signals: None,
                    stop: Some(stop_rx),
                    attached: Some(attached_tx),
                    scrapes: None,
                    // Threads this one starts (the event reader) inherit its name.
                    own_threads,
                };
                runtime()?.block_on(run(&opts, prepared, control))
            })
            .map_err(crate::error::io("start the recorder thread"))?;
        let mut recorder = Recorder {
            stop: Some(stop_tx),
            thread: Some(thread),
        };
        match attached_rx.recv() {
            Ok(()) => Ok(recorder),
            // The recorder failed before attaching: its own error says why.
            Err(_) => Err(recorder
                .join()
                .err()
                .unwrap_or_else(|| Error::Ebpf("the recorder stopped before attaching".into()))),
        }
    }

    /// Whether the recording ended by itself (its command exited, its
    /// duration passed): [`Recorder::wait`] then returns at once.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits for the recording to end by itself, and returns it.
    pub fn wait(mut self) -> Result<RecordOutcome> {
        // Held, not dropped: a dropped sender reads as a stop request.
        let _stop = self.stop.take();
        self.join()
    }

    /// Stops recording and writes the recording.
    pub fn stop(mut self) -> Result<RecordOutcome> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.join()
    }

    fn join(&mut self) -> Result<RecordOutcome> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            _ => Err(Error::Ebpf("the recorder thread panicked".into())),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
            let _ = self.join();
        }
    }
}
