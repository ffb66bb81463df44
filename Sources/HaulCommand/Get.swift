import ArgumentParser
import Dispatch
import Foundation
import Haul

struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get",
        _superCommandName: "haul",
        abstract: "Download files, several at a time.",
        discussion: """
            URLs come from the command line and from an input file (-i FILE, or -i - for standard input) in aria2c's \
            format: one URL per line, then indented key=value options for it (out=NAME, dir=DIR, \
            checksum=sha-256=HEX, header=Name: value). Lines starting with # are comments.

            Exit codes: 0 every item completed (or was skipped); 1 at least one failed or was cancelled; 64 bad usage \
            or invalid input (nothing was downloaded); 130 interrupted by SIGINT or SIGTERM.
            """
    )

    @Argument(help: "The URLs to download (http or https).")
    var urls: [String] = []

    @Option(name: [.customShort("i"), .long], help: "Read URLs and their options from FILE (- for standard input).")
    var inputFile: String?

    @Option(name: [.customShort("d"), .long], help: "The folder to download into (created if missing).")
    var dir: String = "."

    @Option(name: [.customShort("o"), .long], help: "The file name, when exactly one URL is given.")
    var output: String?

    @Option(
        name: .long,
        help: "A checksum the file must match, ALGO=HEX (sha-256, sha-512, sha-1, md5), when exactly one URL is given."
    )
    var checksum: String?

    @Option(name: .long, help: "When the file exists: rename (to name.1.ext), overwrite, skip, or fail.")
    var onConflict: String = "rename"

    @Flag(name: .long, help: "Name files after the server's Content-Disposition header when it sends one.")
    var contentDisposition = false

    @OptionGroup var options: TransferOptions

    @OptionGroup var state: StateOptions

    func validate() throws {
        guard !self.urls.isEmpty || self.inputFile != nil else {
            throw ValidationError("Give at least one URL, or an input file with -i.")
        }
        let single = self.urls.count == 1 && self.inputFile == nil
        if self.output != nil, !single { throw ValidationError("-o/--output applies when exactly one URL is given.") }
        if self.checksum != nil, !single { throw ValidationError("--checksum applies when exactly one URL is given.") }
        if let output = self.output, output.isEmpty || output.contains("/") || output == "." || output == ".." {
            throw ValidationError("-o/--output takes a file name without /; use -d for the folder.")
        }
        if let checksum = self.checksum, Checksum(parsing: checksum) == nil {
            throw ValidationError(
                "--checksum takes ALGO=HEX with ALGO one of sha-256, sha-512, sha-1, md5 and a digest of its length."
            )
        }
        guard ConflictPolicy(name: self.onConflict) != nil else {
            throw ValidationError("--on-conflict must be rename, overwrite, skip or fail.")
        }
        try InputFileParser.validateArguments(self.urls)
    }

    func run() async throws {
        // The state database opens on another thread while the input file is read and checked: both take a few
        // milliseconds before the first request, and one core would otherwise idle through them.
        let state = self.state
        let opening = Task.detached { try state.openStore() }
        let input: CheckedInput?
        do {
            input = try self.inputFile.map { try CheckedInput.open($0) }
        } catch {
            // The input's error is the one to tell; the store is left as opening it left it.
            _ = try? await opening.value
            throw error
        }
        // Absolute, so that the same command run from elsewhere names the same transfers in the state database.
        let folder = URL(filePath: self.dir, directoryHint: .isDirectory).absoluteURL.standardizedFileURL
        var configuration = self.options.configuration(store: try await opening.value)
        configuration.conflictPolicy = ConflictPolicy(name: self.onConflict)!
        configuration.naming = self.contentDisposition ? .contentDisposition : .urlPath
        let requests = self.commandLineRequests(folder: folder)
        let headers = self.options.parsedHeaders
        try await BatchRunner.run(configuration: configuration, options: self.options, requests: requests, input: input)
        {
            item in Self.request(for: item, folder: folder, headers: headers)
        }
    }

    private func commandLineRequests(folder: URL) -> [TransferRequest] {
        self.urls.map { text in
            let url = InputFileParser.parse(text.trimmingWhitespace())!
            let destination: TransferRequest.Destination =
                self.output.map { .file(folder.appending(path: $0, directoryHint: .notDirectory)) } ?? .folder(folder)
            let (bare, headers) = URLCredentials.apply(to: url, headers: self.options.parsedHeaders)
            return TransferRequest(
                url: bare,
                destination: destination,
                checksum: self.checksum.flatMap(Checksum.init(parsing:)),
                headers: headers
            )
        }
    }

    /// The request for one item of the input file: its `dir=` and `out=` under the folder, its headers after `-H`'s.
    private static func request(
        for item: InputItem,
        folder: URL,
        headers: [(name: String, value: String)]
    ) -> TransferRequest {
        var itemFolder = folder
        if let directory = item.directory {
            itemFolder =
                directory.hasPrefix("/")
                ? URL(filePath: directory, directoryHint: .isDirectory)
                : folder.appending(path: directory, directoryHint: .isDirectory)
        }
        let destination: TransferRequest.Destination =
            item.outputName.map { .file(itemFolder.appending(path: $0, directoryHint: .notDirectory)) }
            ?? .folder(itemFolder)
        let (url, headers) = URLCredentials.apply(
            to: item.url,
            headers: headers + item.headers.map { ($0.name, $0.value) }
        )
        return TransferRequest(url: url, destination: destination, checksum: item.checksum, headers: headers)
    }

    static func printOutput(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func printError(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

/// Calls a handler once when one of the signals arrives, instead of the default of dying at once.
final class SignalWatcher {
    private let sources: [any DispatchSourceSignal]
    private let fired = ManagedAtomicFlag()

    init(signals: [Int32], handler: @escaping @Sendable () -> Void) {
        let fired = self.fired
        self.sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                if fired.set() { handler() }
            }
            source.resume()
            return source
        }
    }

    var hasFired: Bool { self.fired.isSet }

    func stop() {
        for source in self.sources { source.cancel() }
    }
}

/// A flag set once, safely from any thread.
final class ManagedAtomicFlag: @unchecked Sendable {
    // @unchecked: every access goes through `lock`.
    private let lock = NSLock()
    private var value = false

    /// Sets the flag; `true` if this call set it.
    func set() -> Bool {
        self.lock.withLock {
            defer { self.value = true }
            return !self.value
        }
    }

    var isSet: Bool { self.lock.withLock { self.value } }
}
