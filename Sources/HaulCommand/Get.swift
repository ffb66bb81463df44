import ArgumentParser
import Dispatch
import Foundation
import Haul

struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Download files, several at a time.",
        discussion: """
            URLs come from the command line and from an input file (-i FILE, or -i - for standard input) in aria2c's
            format: one URL per line, then indented key=value options for it (out=NAME, dir=DIR,
            checksum=sha-256=HEX, header=Name: value). Lines starting with # are comments.

            Exit codes: 0 every item completed (or was skipped); 1 at least one failed or was cancelled; 64 bad usage
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

    @Option(name: [.customShort("j"), .long], help: "How many files download at once.")
    var maxConcurrent: Int = 4

    @Option(name: .long, help: "How many files download at once from one host.")
    var maxPerHost: Int = 6

    @Option(name: .long, help: "How many times a failed file is tried again (transient failures only; 0 = never).")
    var retries: Int = 4

    @Option(name: .long, help: "A bandwidth cap over all transfers, in bytes per second: 500K, 2M, 1.5G.")
    var limitRate: String?

    @Option(name: .long, help: "Seconds without a byte from the server before an attempt fails (it is retried).")
    var timeout: Double = 60

    @Option(
        name: [.customShort("H"), .customLong("header")],
        help: "An extra request header, 'Name: value' (repeatable)."
    )
    var headers: [String] = []

    @Option(
        name: .long,
        help: "A checksum the file must match, ALGO=HEX (sha-256, sha-512, sha-1, md5), when exactly one URL is given."
    )
    var checksum: String?

    @Option(name: .long, help: "When the file exists: rename (to name.1.ext), overwrite, skip, or fail.")
    var onConflict: String = "rename"

    @Flag(name: .long, help: "Name files after the server's Content-Disposition header when it sends one.")
    var contentDisposition = false

    @Flag(name: .long, help: "Print one JSON event per line on standard output (human messages go to standard error).")
    var json = false

    @Flag(name: [.customShort("q"), .long], help: "Print only failures.")
    var quiet = false

    @OptionGroup var state: StateOptions

    func validate() throws {
        guard !self.urls.isEmpty || self.inputFile != nil else {
            throw ValidationError("Give at least one URL, or an input file with -i.")
        }
        guard (1...256).contains(self.maxConcurrent) else {
            throw ValidationError("--max-concurrent must be between 1 and 256.")
        }
        guard (1...256).contains(self.maxPerHost) else {
            throw ValidationError("--max-per-host must be between 1 and 256.")
        }
        guard (0...100).contains(self.retries) else { throw ValidationError("--retries must be between 0 and 100.") }
        guard self.timeout > 0, self.timeout <= 86_400 else {
            throw ValidationError("--timeout must be more than 0 and at most 86400 seconds.")
        }
        if let rate = self.limitRate, Rate.parse(rate) == nil {
            throw ValidationError("--limit-rate takes a rate like 500K, 2M or 1.5G (bytes per second).")
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
        for header in self.headers where HTTPHeaderLine(parsing: header) == nil {
            throw ValidationError("-H/--header takes 'Name: value', got '\(header)'.")
        }
        if self.json && self.quiet { throw ValidationError("--json and --quiet cannot be used together.") }
        for (index, url) in self.urls.enumerated() {
            do {
                _ = try InputFileParser.url(url, lineNumber: index + 1)
            } catch {
                throw ValidationError("Argument \(index + 1): \(error.message)")
            }
        }
    }

    func run() async throws {
        var input: InputLines?
        if let inputFile = self.inputFile {
            // A first pass checks every line (a file in constant memory; standard input, which cannot be read twice,
            // is kept), so that a bad line downloads nothing.
            do {
                let lines = try InputLines.open(inputFile)
                if let error = Self.firstError(in: lines) {
                    Self.printError("haul: \(inputFile): \(error)")
                    throw ExitCode(64)
                }
                input = lines
            } catch let error as InputFileError {
                Self.printError("haul: \(inputFile): \(error.message)")
                throw ExitCode(64)
            }
        }
        // Absolute, so that the same command run from elsewhere names the same transfers in the state database.
        let folder = URL(filePath: self.dir, directoryHint: .isDirectory).absoluteURL.standardizedFileURL
        var configuration = TransferManager.Configuration()
        configuration.store = try self.state.openStore()
        configuration.maximumConcurrentTransfers = self.maxConcurrent
        configuration.maximumTransfersPerHost = self.maxPerHost
        configuration.conflictPolicy = ConflictPolicy(name: self.onConflict)!
        configuration.naming = self.contentDisposition ? .contentDisposition : .urlPath
        configuration.retryPolicy.maximumAttempts = self.retries + 1
        configuration.bandwidthLimit = self.limitRate.flatMap(Rate.parse)
        configuration.idleTimeout = .milliseconds(Int64(self.timeout * 1000))
        let mode: EventRenderer.Mode = self.json ? .json : (self.quiet ? .quiet : .plain(progressEvery: .seconds(2)))
        let started = ContinuousClock.now
        let requests = self.commandLineRequests(folder: folder)

        let (report, interrupted) = try await TransferManager.withTransferManager(configuration: configuration) {
            manager in
            let batch = try manager.makeBatch()
            let events = batch.events
            // Ctrl-C or SIGTERM: stop every transfer, keep the partial files and the state, exit 130; rerunning resumes.
            let interruption = SignalWatcher(signals: [SIGINT, SIGTERM]) { manager.stopAll() }
            defer { interruption.stop() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await EventPrinter.print(events, mode: mode) }
                for request in requests { try batch.add(request) }
                if let input {
                    try Self.addItems(from: input, to: batch, folder: folder, headers: self.parsedHeaders)
                }
                batch.seal()
                try await group.waitForAll()
            }
            return (await batch.report(), interruption.hasFired)
        }

        Summary.print(report, elapsed: .now - started, json: self.json, quiet: self.quiet)
        if interrupted { throw ExitCode(130) }
        if !report.isSuccess { throw ExitCode(1) }
    }

    private var parsedHeaders: [(name: String, value: String)] {
        self.headers.compactMap(HTTPHeaderLine.init(parsing:)).map { ($0.name, $0.value) }
    }

    private func commandLineRequests(folder: URL) -> [TransferRequest] {
        self.urls.map { text in
            let url = URL(string: text.trimmingCharacters(in: .whitespaces))!
            let destination: TransferRequest.Destination =
                self.output.map { .file(folder.appending(path: $0, directoryHint: .notDirectory)) } ?? .folder(folder)
            return TransferRequest(
                url: url,
                destination: destination,
                checksum: self.checksum.flatMap(Checksum.init(parsing:)),
                headers: self.parsedHeaders
            )
        }
    }

    private static func firstError(in lines: InputLines) -> InputFileError? {
        do {
            var parser = InputFileParser()
            try lines.forEach { _ = try parser.feed($0) }
            return nil
        } catch let error as InputFileError {
            return error
        } catch {
            return InputFileError(lineNumber: 0, message: "\(error)")
        }
    }

    private static func addItems(
        from lines: InputLines,
        to batch: Batch,
        folder: URL,
        headers: [(name: String, value: String)]
    ) throws {
        var parser = InputFileParser()
        func add(_ item: InputItem) throws {
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
            try batch.add(
                TransferRequest(
                    url: item.url,
                    destination: destination,
                    checksum: item.checksum,
                    headers: headers + item.headers.map { ($0.name, $0.value) }
                )
            )
        }
        try lines.forEach { line in
            if let item = try parser.feed(line) { try add(item) }
        }
        if let item = parser.finish() { try add(item) }
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
