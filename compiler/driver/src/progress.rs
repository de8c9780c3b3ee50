//! A spinner for long compilations.

use std::path::Path;

/// A spinner on stderr while a model compiles, shown only when stderr is a terminal and compiling takes longer
/// than a moment (tests and pipes see nothing).
pub struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    /// Starts the spinner for `model`.
    pub fn start(model: &Path) -> Progress {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(format!("compiling {}: reading", model.display()));
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Progress(Some(bar))
    }

    /// Says what is being done now.
    pub fn phase(&self, what: &str) {
        if let Some(bar) = &self.0 {
            let msg = bar.message();
            let model = msg.split(':').next().unwrap_or("compiling");
            bar.set_message(format!("{model}: {what}"));
        }
    }

    /// Clears the spinner.
    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    /// An error leaves no spinner behind its one-line message.
    fn drop(&mut self) {
        self.finish();
    }
}
