import ArgumentParser
import Foundation
import Haul

/// Where `haul` keeps its persistent queue.
struct StateOptions: ParsableArguments {
    @Option(
        name: .customLong("state"),
        help: "The state database (default: $XDG_STATE_HOME/haul/state.sqlite, else ~/.local/state/haul/state.sqlite)."
    )
    var path: String?

    @Flag(
        name: .customLong("no-state"),
        help: "Keep no state: a rerun cannot resume, and nothing is written outside -d."
    )
    var disabled = false

    func validate() throws {
        if self.disabled && self.path != nil {
            throw ValidationError("--state and --no-state cannot be used together.")
        }
    }

    /// The database path, following the XDG base directory convention.
    static func defaultPath(environment: [String: String]) -> URL {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return URL(filePath: state).appending(path: "haul/state.sqlite")
        }
        let home = environment["HOME"].map { URL(filePath: $0) } ?? FileManager.default.homeDirectoryForCurrentUser
        return home.appending(path: ".local/state/haul/state.sqlite")
    }

    /// The path to use, or `nil` with `--no-state`.
    var resolvedPath: URL? {
        guard !self.disabled else { return nil }
        if let path = self.path { return URL(filePath: path).absoluteURL }
        return Self.defaultPath(environment: ProcessInfo.processInfo.environment)
    }

    /// Opens the store, or says why it cannot be opened (exit 64 is not right for a broken disk, so it is 1).
    func openStore() throws -> TransferStore? {
        guard let path = self.resolvedPath else { return nil }
        // The command owns its process: nothing else here reads SQLite's memory statistics.
        TransferStore.disableMemoryStatistics()
        do {
            return try TransferStore(path: path)
        } catch {
            let reason = (error as? HaulError)?.message ?? "\(error)"
            Get.printError("haul: cannot open the state database \(path.path): \(reason)")
            throw ExitCode(1)
        }
    }
}
