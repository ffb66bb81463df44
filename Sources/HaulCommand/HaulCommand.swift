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
        await Self.main(nil)
    }
}

/// The process's table of file descriptors, grown to 1,024 slots when `main` starts.
enum DescriptorTable {
    /// How many slots were reserved, if any: then new small files may be written without a name even with the
    /// state database (``TransferManager/Configuration/writesSmallFilesUnnamed``).
    static let reserved = TransferManager.reserveFileDescriptors()
}
