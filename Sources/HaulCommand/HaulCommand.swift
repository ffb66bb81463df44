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
    /// script's, a parse or validation error. Those go through ``main(_:)`` from the root, so what they print is
    /// unchanged. Parsed from the root, ArgumentParser builds the argument sets of every command by reflection and parses
    /// the arguments twice more looking for a completion-script request; parsed alone, `get` is built once. ``Get``'s
    /// configuration names `haul` as its super-command, which keeps that parse from looking for a completion script.
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
