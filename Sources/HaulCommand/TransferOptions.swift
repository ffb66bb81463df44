import ArgumentParser
import Foundation
import Haul

/// The options every transferring command (`get`, `put`, `rm`, `resume`) shares: limits, retries, timeouts, headers,
/// output.
struct TransferOptions: ParsableArguments {
    @Option(name: [.customShort("j"), .long], help: "How many transfers run at once.")
    var maxConcurrent: Int = 4

    // As many as -j unless given: -j is what was asked for, as with curl's --parallel-max, wget2's --max-threads and
    // aria2c's -j, none of which caps a host below it. (A cap of 6 beside -j 16 made a list from one host 7–8 % slower
    // on small files; -j's default, 4, is under 6 anyway.)
    @Option(name: .long, help: "How many transfers run at once with one host (default: as many as -j).")
    var maxPerHost: Int?

    @Option(name: .long, help: "How many times a failed transfer is tried again (transient failures only; 0 = never).")
    var retries: Int = 4

    @Option(name: .long, help: "A bandwidth cap over all transfers, in bytes per second: 500K, 2M, 1.5G.")
    var limitRate: String?

    @Option(name: .long, help: "Seconds without progress before an attempt fails (it is retried).")
    var timeout: Double = 60

    @Option(name: .long, help: "Seconds a connection may take to open (TLS included) before the attempt fails.")
    var connectTimeout: Double = 10

    @Option(name: .customLong("max-redirs"), help: "How many redirects a request follows.")
    var maxRedirects: Int = 10

    @Option(
        name: [.customShort("A"), .long],
        help: ArgumentHelp("The User-Agent sent with every request (default: Haul/0.1).", valueName: "text")
    )
    var userAgent: String?

    @Option(
        name: [.customShort("H"), .customLong("header")],
        help: "An extra request header, 'Name: value' (repeatable)."
    )
    var headers: [String] = []

    @Option(
        name: .customLong("ca-certificate"),
        help: "A PEM file of certificate authorities trusted for https besides the system's (repeatable)."
    )
    var caCertificates: [String] = []

    @Flag(
        name: [.customShort("k"), .long],
        help: "Do not verify https certificates (test servers only: anyone between could read and change the files)."
    )
    var insecure = false

    @Flag(
        name: [.customShort("n"), .long],
        help: "Send the logins of ~/.netrc to their hosts (Authorization: Basic), as curl -n."
    )
    var netrc = false

    @Option(
        name: .customLong("netrc-file"),
        help: ArgumentHelp("Send the logins of this netrc file to their hosts.", valueName: "file")
    )
    var netrcFile: String?

    @Option(
        name: [.customShort("b"), .customLong("load-cookies")],
        help: ArgumentHelp(
            "Send the cookies of this file (Netscape format, as curl -c and browsers' exporters write it).",
            valueName: "file"
        )
    )
    var cookieFile: String?

    @Option(
        name: [.customShort("c"), .customLong("save-cookies")],
        help: ArgumentHelp(
            "Write the cookies, those of -b and those the servers set, to this file at the end (Netscape format).",
            valueName: "file"
        )
    )
    var saveCookiesFile: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "An HTTP proxy for every request, http://[user:password@]host[:port] (port 1080 when none is given; "
                + "default: the http_proxy, https_proxy and all_proxy variables, as curl reads them).",
            valueName: "url"
        )
    )
    var proxy: String?

    @Option(
        name: .customLong("no-proxy"),
        help: ArgumentHelp(
            "Hosts reached without the proxy, comma-separated: example.com (and the hosts under it), an address, or "
                + "* for every host (default: the no_proxy variable).",
            valueName: "hosts"
        )
    )
    var noProxy: String?

    @Flag(name: .long, help: "Print one JSON event per line on standard output (human messages go to standard error).")
    var json = false

    @Flag(name: [.customShort("q"), .long], help: "Print only failures.")
    var quiet = false

    func validate() throws {
        guard (1...256).contains(self.maxConcurrent) else {
            throw ValidationError("--max-concurrent must be between 1 and 256.")
        }
        if let maxPerHost = self.maxPerHost, !(1...256).contains(maxPerHost) {
            throw ValidationError("--max-per-host must be between 1 and 256.")
        }
        guard (0...100).contains(self.retries) else { throw ValidationError("--retries must be between 0 and 100.") }
        guard self.timeout > 0, self.timeout <= 86_400 else {
            throw ValidationError("--timeout must be more than 0 and at most 86400 seconds.")
        }
        guard self.connectTimeout > 0, self.connectTimeout <= 3_600 else {
            throw ValidationError("--connect-timeout must be more than 0 and at most 3600 seconds.")
        }
        guard (0...100).contains(self.maxRedirects) else {
            throw ValidationError("--max-redirs must be between 0 and 100.")
        }
        if let agent = self.userAgent, HTTPHeaderLine(parsing: "User-Agent: \(agent)")?.value != agent {
            throw ValidationError("--user-agent takes text on one line, without spaces around it.")
        }
        if let rate = self.limitRate, Rate.parse(rate) == nil {
            throw ValidationError("--limit-rate takes a rate like 500K, 2M or 1.5G (bytes per second).")
        }
        for header in self.headers where HTTPHeaderLine(parsing: header) == nil {
            throw ValidationError("-H/--header takes 'Name: value', got '\(header)'.")
        }
        if self.json && self.quiet { throw ValidationError("--json and --quiet cannot be used together.") }
        if self.netrc && self.netrcFile != nil { throw ValidationError("--netrc and --netrc-file go one at a time.") }
        do {
            _ = try self.hostCredentials()
            _ = try self.cookieJar()
        } catch {
            throw ValidationError("\(error.message).")
        }
        do {
            _ = try self.proxySettings()
        } catch {
            throw ValidationError(self.proxy == nil ? "\(error.message)." : "--proxy: \(error.message).")
        }
        for path in self.caCertificates {
            // Read here so that a wrong path is bad usage, before anything starts; the manager parses them.
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ValidationError("--ca-certificate: cannot read \(path).")
            }
            guard text.contains("-----BEGIN CERTIFICATE-----") else {
                throw ValidationError("--ca-certificate: \(path) holds no PEM certificate.")
            }
        }
    }

    /// The logins of `--netrc-file`, or of `~/.netrc` with `--netrc`; none without either.
    func hostCredentials() throws(HaulError) -> HostCredentials {
        let path: String
        if let file = self.netrcFile {
            path = file
        } else if self.netrc {
            path = FileManager.default.homeDirectoryForCurrentUser.appending(path: ".netrc").path
        } else {
            return HostCredentials()
        }
        return try Self.parse(path, as: "netrc file", with: HostCredentials.init(netrc:))
    }

    /// The file at `path`, read and parsed by `parse`; an error names the file (`kind` when it cannot be read).
    private static func parse<Value>(
        _ path: String,
        as kind: String,
        with parse: (String) throws(HaulError) -> Value
    ) throws(HaulError) -> Value {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw HaulError(.invalidRequest, "Cannot read the \(kind) \(path)")
        }
        do {
            return try parse(text)
        } catch {
            throw HaulError(.invalidRequest, "\(path): \(error.message)")
        }
    }

    /// The cookie engine: on with `-b` or `-c` (as curl's), sending the cookies of `-b`'s file and keeping those the
    /// servers set for the later requests of the run; `nil` without either.
    func cookieStorage() throws(HaulError) -> CookieStorage? {
        guard self.cookieFile != nil || self.saveCookiesFile != nil else { return nil }
        return CookieStorage(try self.cookieJar())
    }

    /// Writes the run's cookies to `-c`'s file (readable by its owner only: they are credentials), if given.
    func saveCookies(from configuration: TransferManager.Configuration) {
        guard let path = self.saveCookiesFile, let storage = configuration.cookies else { return }
        let url = URL(filePath: path)
        do {
            try Data(storage.jar.netscapeText.utf8).write(to: url, options: .atomic)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
        } catch {
            Get.printError("haul: cannot write the cookies to \(path): \(error.localizedDescription)")
        }
    }

    /// The cookies of `--load-cookies`; none without it.
    func cookieJar() throws(HaulError) -> CookieJar {
        guard let path = self.cookieFile else { return CookieJar() }
        return try Self.parse(path, as: "cookie file") { text throws(HaulError) in try CookieJar(netscape: text) }
    }

    /// The proxies: `--proxy` for every request, else the environment's (``ProxySettings/init(environment:)``), with
    /// `--no-proxy`'s hosts, else the environment's, reached directly.
    func proxySettings() throws(HaulError) -> ProxySettings {
        // The few variables asked for by name: the whole environment as a dictionary is built for nothing else.
        var environment: [String: String] = [:]
        for name in ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"] {
            if let value = getenv(name) { environment[name] = String(cString: value) }
        }
        var settings =
            if let proxy = self.proxy { ProxySettings(all: try Proxy(parsing: proxy)) } else {
                try ProxySettings(environment: environment)
            }
        // With --proxy the environment's proxies are not asked for (one curl could not use must not stop it): only
        // its hosts to reach directly.
        if self.proxy != nil {
            settings.bypass = try ProxySettings(environment: environment.filter { $0.key.lowercased() == "no_proxy" })
                .bypass
        }
        if let noProxy = self.noProxy { settings.bypass = ProxySettings.hosts(in: noProxy) }
        return settings
    }

    var parsedHeaders: [(name: String, value: String)] {
        self.headers.compactMap(HTTPHeaderLine.init(parsing:)).map { ($0.name, $0.value) }
    }

    var mode: EventRenderer.Mode {
        self.json ? .json : (self.quiet ? .quiet : .plain(progressEvery: .seconds(2)))
    }

    /// The manager's configuration for these options.
    func configuration(store: TransferStore?) -> TransferManager.Configuration {
        var configuration = TransferManager.Configuration()
        configuration.store = store
        configuration.maximumConcurrentTransfers = self.maxConcurrent
        configuration.maximumTransfersPerHost = self.maxPerHost ?? self.maxConcurrent
        configuration.retryPolicy.maximumAttempts = self.retries + 1
        configuration.bandwidthLimit = self.limitRate.flatMap(Rate.parse)
        // Checked in `validate()`.
        configuration.proxies = (try? self.proxySettings()) ?? ProxySettings()
        configuration.hostCredentials = (try? self.hostCredentials()) ?? HostCredentials()
        configuration.cookies = try? self.cookieStorage()
        configuration.idleTimeout = .milliseconds(Int64(self.timeout * 1000))
        configuration.connectTimeout = .milliseconds(Int64(self.connectTimeout * 1000))
        configuration.maximumRedirects = self.maxRedirects
        if let agent = self.userAgent { configuration.userAgent = agent }
        configuration.additionalTrustedCertificates = self.caCertificates.map { URL(filePath: $0) }
        configuration.verifiesCertificates = !self.insecure
        // The table of descriptors was grown before the first thread, so files held open until their completion is
        // committed cost no wait: new small files are written without a name with the state database too.
        if let reserved = DescriptorTable.reserved, reserved >= 256 { configuration.writesSmallFilesUnnamed = true }
        return configuration
    }
}

/// Runs one batch the way every transferring command does: events printed as the options ask, SIGINT and SIGTERM
/// stop cleanly (partial state kept, exit 130), a summary at the end, exit 1 when an item did not succeed.
enum BatchRunner {
    static func run(
        configuration: TransferManager.Configuration,
        options: TransferOptions,
        expectedItems: Int? = nil,
        fill: (BatchFeeder) async throws -> Void
    ) async throws {
        let mode = options.mode
        let started = ContinuousClock.now
        let (report, interrupted, transferredBytes) = try await TransferManager.withTransferManager(
            configuration: configuration
        ) {
            manager in
            let batch = try manager.makeBatch()
            let events = batch.events(EventPrinter.selection(for: mode))
            // Ctrl-C or SIGTERM: stop every transfer, keep the partial files and the state, exit 130; rerunning resumes.
            let interruption = SignalWatcher(signals: [SIGINT, SIGTERM]) { manager.stopAll() }
            defer { interruption.stop() }
            let transferredBytes = try await withThrowingTaskGroup(of: Int64.self) { group in
                group.addTask { await EventPrinter.print(events, mode: mode) }
                if let expectedItems { batch.expectItems(expectedItems) }
                do {
                    let feeder = BatchFeeder(batch: batch)
                    try await fill(feeder)
                    try await feeder.flush()
                    batch.seal()
                } catch let error as HaulError where error.code == .batchFinished {
                    // A stop (Ctrl-C) ended the batch while its list was being read: the rest is not added.
                }
                return try await group.reduce(0, +)
            }
            return (await batch.report(), interruption.hasFired, transferredBytes)
        }
        Summary.print(
            report,
            elapsed: .now - started,
            transferredBytes: transferredBytes,
            json: options.json,
            quiet: options.quiet
        )
        options.saveCookies(from: configuration)
        if interrupted, !options.quiet,
            let line = Summary.interruptionLine(for: report, keepsState: configuration.store != nil)
        {
            Get.printError(line)
        }
        if interrupted { throw ExitCode(130) }
        if !report.isSuccess { throw ExitCode(1) }
    }
}

extension BatchRunner {
    /// Runs one batch of the command line's requests, then the input file's items (a window at a time), each made into
    /// a request by `request`.
    static func run(
        configuration: TransferManager.Configuration,
        options: TransferOptions,
        requests: [TransferRequest],
        input: CheckedInput?,
        request: (InputItem) -> TransferRequest
    ) async throws {
        try await self.run(
            configuration: configuration,
            options: options,
            expectedItems: requests.count + (input?.itemCount ?? 0)
        ) { batch in
            for request in requests { try await batch.add(request) }
            try await input?.forEachItem { item in try await batch.add(request(item)) }
        }
    }
}

/// Adds requests to a batch a window at a time: a list of 100,000 URLs keeps at most ``window`` transfers queued or
/// running, so memory holds those and the finished ones' results, not 100,000 queued requests. Requests go to the
/// batch in slices of ``slice`` (the whole list is read before the first is added, so a slice never waits for input).
final class BatchFeeder {
    /// At most this many unfinished items: 16 times the largest `-j`, so the queue never runs dry while it refills.
    static let window = 4096
    /// How many requests are added at once: one look into the store and one turn of the manager's lock for each
    /// slice, instead of three locks and a look per request while the running transfers take the same lock.
    static let slice = 32

    let batch: Batch
    private var pending: [TransferRequest] = []

    init(batch: Batch) {
        self.batch = batch
    }

    func add(_ request: TransferRequest) async throws {
        self.pending.append(request)
        if self.pending.count >= Self.slice { try await self.flush() }
    }

    /// Adds the requests held back; called once more after the last one.
    func flush() async throws {
        guard !self.pending.isEmpty else { return }
        if self.batch.unfinishedCount + self.pending.count > Self.window {
            // Refill in halves: one wake-up per 2,048 items, not one per item.
            await self.batch.waitUntilUnfinished(atMost: Self.window / 2)
        }
        let slice = self.pending
        self.pending.removeAll(keepingCapacity: true)
        try self.batch.add(contentsOf: slice)
    }
}
