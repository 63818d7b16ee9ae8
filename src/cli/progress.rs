//! Progress of the long commands (`purge`, `queue retry --all`,
//! `reprocess` by filter): a bar redrawn in place when stderr is a
//! terminal, else one plain line per step on stderr, so that a log or a
//! CI job keeps every count and stdout keeps only the command's result.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

pub struct Progress {
    /// `None`: stderr is not a terminal, plain lines instead.
    bar: Option<ProgressBar>,
    label: &'static str,
    total: Option<u64>,
}

impl Progress {
    /// A bar out of `total`, or a counter when the total is not known
    /// beforehand (a purge deletes until nothing is left).
    pub fn start(label: &'static str, total: Option<u64>) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let (bar, template) = match total {
                Some(total) => (
                    ProgressBar::new(total),
                    "{prefix} [{bar:30}] {pos}/{len} {msg}",
                ),
                None => (ProgressBar::new_spinner(), "{prefix} {spinner} {msg}"),
            };
            bar.set_draw_target(ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(label);
            bar
        });
        Progress { bar, label, total }
    }

    /// `done` steps so far, and what the last one was.
    pub fn step(&self, done: u64, message: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(message.to_owned());
                if self.total.is_none() {
                    bar.tick();
                }
            }
            None => match self.total {
                Some(total) => eprintln!("{}: {done}/{total} {message}", self.label),
                None => eprintln!("{}: {message}", self.label),
            },
        }
    }

    /// Clears the bar, so that the command's result is printed below it.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
