use clap::Parser;
use tracing_subscriber::EnvFilter;

use hopper::cli::{Cli, Command};

// The request path allocates many small, short-lived buffers; mimalloc is
// markedly cheaper than glibc malloc for that pattern (see ARCHITECTURE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let serve = match cli.command {
        Some(Command::Serve(args)) => args,
        None => cli.serve,
        Some(client_command) => return hopper::cli::run_client(client_command, cli.client),
    };
    let json_logs = serve.log_format == "json";
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if json_logs {
        tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_env_filter(filter)
            .init();
    } else {
        // Colour only on a terminal: journald and files get plain text.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
        tracing_subscriber::fmt()
            .with_ansi(ansi)
            .with_env_filter(filter)
            .init();
    }
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "a thread panicked");
    }));
    let result = actix_web::rt::System::new().block_on(hopper::server::run(serve.into_config()));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "hopper stopped");
            eprintln!("hopper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
