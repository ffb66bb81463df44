import ArgumentParser
import Haul

@main
struct HaulCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "Move batches of files over HTTP(S).",
        discussion: """
            Exit codes: 0 every item completed (or was already there and skipped); 1 at least one item failed or was \
            cancelled; 64 bad usage or invalid input (nothing was transferred); 130 interrupted by SIGINT or SIGTERM.
            """,
        version: "0.1.0",
        subcommands: [Get.self, Put.self, Remove.self, Status.self, Resume.self]
    )

    static func main() async {
        // While the process has one thread: grown later, by the event loops, each doubling of the table waits.
        _ = DescriptorTable.reserved
        // Nearly every command transfers: the event loops start while the arguments are parsed and the input read.
        TransferManager.startEventLoops()
        if let get = Self.parsedGet(CommandLine.arguments) {
            do {
                try await get.run()
            } catch {
                Self.exit(withError: error)
            }
        } else {
            await Self.main(nil)
        }
    }

    /// `haul get`'s arguments parsed as a command of their own, when they parse and pass validation; `nil` for
    /// any other command, and for anything that is not a plain `get` to run: a help or version request, a completion
    /// script's, a parse or validation error. Those go through ``main(_:)`` from the root as before, so what they
    /// print is unchanged.
    ///
    /// Parsed from the root, a `get` cost about a quarter of the instructions of a run over 200 files of 1 MiB
    /// (`callgrind`): ArgumentParser builds the argument sets of the root and then of `get` by reflection, and before
    /// either looks for a request for a completion script by parsing the arguments twice more, as the arguments of
    /// its own completion commands. Parsed alone, `get` is built once: a one-file run takes 55.3 → 49.1 million
    /// instructions, one over 200 files of 1 MiB 0.962 of them. ``Get``'s configuration names `haul` as its
    /// super-command, which keeps that parse from looking for a completion script (a super-command's pseudo-command
    /// has none, so `--generate-completion-script` is an unknown option there and goes to the root).
    static func parsedGet(_ arguments: [String]) -> Get? {
        guard arguments.count > 1, arguments[1] == "get" else { return nil }
        return try? Get.parse(Array(arguments.dropFirst(2)))
    }
}

/// The process's table of file descriptors, grown to 1,024 slots when `main` starts.
enum DescriptorTable {
    /// How many slots were reserved, if any: then new small files may be written without a name even with the
    /// state database (``TransferManager/Configuration/writesSmallFilesUnnamed``).
    static let reserved = TransferManager.reserveFileDescriptors()
}
