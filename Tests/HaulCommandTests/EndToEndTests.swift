import Foundation
import HaulTesting
import Testing

/// The end of a process, heard through its termination handler (set before the process starts, so that one that ends
/// at once is not missed). Foundation's `waitUntilExit()` spins a run loop for that news, and on Linux, off the thread
/// that started the process, it can wait for ever: one test run here hung with three tests' nginx still running.
final class ProcessEnd: @unchecked Sendable {
    private let lock = NSLock()
    private var hasEnded = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init(of process: Process) {
        process.terminationHandler = { [self] _ in
            let waiters = self.lock.withLock {
                self.hasEnded = true
                defer { self.waiters = [] }
                return self.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    /// Returns once the process has ended (at once if it has).
    func wait() async {
        await withCheckedContinuation { continuation in
            let hasEnded = self.lock.withLock {
                if !self.hasEnded { self.waiters.append(continuation) }
                return self.hasEnded
            }
            if hasEnded { continuation.resume() }
        }
    }
}

/// Runs the built `haul` binary.
struct HaulProcess {
    /// Runs `body`, which blocks (a read from a pipe), on a thread of its own. Swift's
    /// concurrency runs the tests on as many threads as the machine has cores: on two cores, two tests blocked there
    /// waiting for their `haul` would stop every other test, and the time limits that should end them.
    static func blocking<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: body()) }.start()
        }
    }

    /// Starts `process`, its end to be heard through ``ProcessEnd``, and kills it if it still runs after ``watchdog``
    /// unless the returned work item is cancelled first (once the caller is done with it).
    static func launch(_ process: Process) throws -> (end: ProcessEnd, watchdog: DispatchWorkItem) {
        let end = ProcessEnd(of: process)
        try process.run()
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { if process.isRunning { kill(pid, SIGKILL) } }
        DispatchQueue.global().asyncAfter(
            deadline: .now() + .seconds(Int(self.watchdog.components.seconds)),
            execute: watchdog
        )
        return (end, watchdog)
    }

    static var executable: URL {
        // The test bundle sits beside the products of the same build.
        let products =
            Bundle.main.bundleURL.pathExtension == "xctest"
            ? Bundle.main.bundleURL.deletingLastPathComponent() : Bundle.main.bundleURL
        return products.appending(path: "haul")
    }

    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// A process running `haul` with a private state folder (`XDG_STATE_HOME`), so tests never touch the real one,
    /// and none of the machine's proxy variables (the test servers are on loopback); `extra` adds variables.
    static func makeProcess(
        _ arguments: [String],
        stateHome: URL? = nil,
        environment extra: [String: String] = [:]
    ) -> Process {
        let process = Process()
        process.executableURL = self.executable
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        for name in ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"] {
            environment[name] = nil
        }
        environment["XDG_STATE_HOME"] =
            (stateHome ?? FileManager.default.temporaryDirectory.appending(path: "haul-state-\(UUID().uuidString)"))
            .path
        environment["NO_COLOR"] = "1"
        environment.merge(extra) { $1 }
        process.environment = environment
        return process
    }

    /// How long a run may take before it is stopped (`SIGKILL`), so that a `haul` that never ends fails its test with
    /// what it printed instead of holding the whole test run.
    static let watchdog: Duration = .seconds(100)

    static func run(
        _ arguments: [String],
        stdin: String? = nil,
        stateHome: URL? = nil,
        environment: [String: String] = [:]
    ) async throws -> Output {
        let process = self.makeProcess(arguments, stateHome: stateHome, environment: environment)
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let input = Pipe()
        process.standardInput = input
        let (end, stopping) = try self.launch(process)
        defer { stopping.cancel() }
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        async let stdoutData = self.blocking { out.fileHandleForReading.readDataToEndOfFile() }
        async let stderrData = self.blocking { err.fileHandleForReading.readDataToEndOfFile() }
        let (o, e) = await (stdoutData, stderrData)
        await end.wait()
        return Output(
            status: process.terminationStatus,
            stdout: String(decoding: o, as: UTF8.self),
            stderr: String(decoding: e, as: UTF8.self)
        )
    }
}

@Suite("The haul binary, end to end", .timeLimit(.minutes(2)))
struct EndToEndTests {
    static let body = FaultInjectingServer.body(size: 200_000, seed: 3)

    func withFolder<T>(_ body: (URL) async throws -> T) async throws -> T {
        let url = FileManager.default.temporaryDirectory.appending(path: "haul-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: url) }
        return try await body(url)
    }

    @Test func goesThroughTheProxyTheEnvironmentNamesUnlessToldOtherwise() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a.bin": .init(body: Self.body)]) { server in
            try await ForwardProxy.withProxy { proxy in
                try await self.withFolder { folder in
                    let url = server.url("/a.bin").absoluteString
                    let viaVariable = try await HaulProcess.run(
                        ["get", url, "-d", folder.appending(path: "one").path, "--no-state"],
                        environment: ["http_proxy": proxy.url()]
                    )
                    #expect(viaVariable.status == 0, "\(viaVariable.stderr)")
                    #expect(try Data(contentsOf: folder.appending(path: "one/a.bin")) == Data(Self.body))
                    #expect(proxy.requests.map(\.target) == [url])
                    let bypassing = try await HaulProcess.run(
                        [
                            "get", url, "-d", folder.appending(path: "two").path, "--no-state", "--no-proxy",
                            "127.0.0.1",
                        ],
                        environment: ["http_proxy": proxy.url()]
                    )
                    #expect(bypassing.status == 0, "\(bypassing.stderr)")
                    #expect(proxy.requests.count == 1, "reached directly")
                    // A proxy variable Haul cannot use does not matter when --proxy names the proxy.
                    let viaOption = try await HaulProcess.run(
                        ["get", url, "-d", folder.appending(path: "three").path, "--no-state", "--proxy", proxy.url()],
                        environment: ["https_proxy": "socks5://h:1"]
                    )
                    #expect(viaOption.status == 0, "\(viaOption.stderr)")
                    #expect(proxy.requests.count == 2)
                    let bad = try await HaulProcess.run(["get", url, "--no-state", "--proxy", "socks5://h:1"])
                    #expect(bad.status == 64)
                    #expect(bad.stderr.contains("--proxy: Only http:// proxies are supported"), "\(bad.stderr)")
                }
            }
        }
    }

    @Test func sendsTheLoginsOfANetrcFileAndTheCookiesOfACookieFile() async throws {
        let resources: [String: FaultInjectingServer.Resource] = [
            "/a.bin": .init(body: Self.body),
            "/set.bin": .init(body: [1], faults: [.addHeaders(["Set-Cookie": "fresh=new; Max-Age=3600"])]),
        ]
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await self.withFolder { folder in
                let netrc = folder.appending(path: "netrc")
                try Data("machine 127.0.0.1 login ann password s3cret\n".utf8).write(to: netrc)
                let url = server.url("/a.bin").absoluteString
                let output = try await HaulProcess.run([
                    "get", url, "-d", folder.appending(path: "out").path, "--no-state", "--netrc-file", netrc.path,
                ])
                #expect(output.status == 0, "\(output.stderr)")
                let expected = "Basic " + Data("ann:s3cret".utf8).base64EncodedString()
                #expect(server.requests.map { $0.headers["authorization"] } == [expected])
                let cookies = folder.appending(path: "cookies.txt")
                try Data("127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tabc\n".utf8).write(to: cookies)
                let withCookies = try await HaulProcess.run([
                    "get", url, "-d", folder.appending(path: "again").path, "--no-state", "-b", cookies.path,
                ])
                #expect(withCookies.status == 0, "\(withCookies.stderr)")
                #expect(server.requests.last?.headers["cookie"] == "session=abc")
                let saved = folder.appending(path: "saved.txt")
                let saving = try await HaulProcess.run([
                    "get", server.url("/set.bin").absoluteString, "-d", folder.appending(path: "set").path,
                    "--no-state", "-b", cookies.path, "-c", saved.path,
                ])
                #expect(saving.status == 0, "\(saving.stderr)")
                let text = try String(contentsOf: saved, encoding: .utf8)
                #expect(text.contains("127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tabc"), "\(text)")
                #expect(text.contains("\tfresh\tnew"), "\(text)")
                let mode = try FileManager.default.attributesOfItem(atPath: saved.path)[.posixPermissions] as? Int
                #expect(mode == 0o600)
                let missing = try await HaulProcess.run([
                    "get", url, "--no-state", "--netrc-file", folder.appending(path: "none").path,
                ])
                #expect(missing.status == 64)
                #expect(missing.stderr.contains("Cannot read the netrc file"), "\(missing.stderr)")
            }
        }
    }

    @Test func exitsZeroWhenEveryFileCompletesAndWritesThemByteForByte() async throws {
        try await FaultInjectingServer.withServer(resources: [
            "/a.bin": .init(body: Self.body), "/b.bin": .init(body: [1, 2]),
        ]) { server in
            try await self.withFolder { folder in
                let output = try await HaulProcess.run([
                    "get", server.url("/a.bin").absoluteString, server.url("/b.bin").absoluteString, "-d", folder.path,
                ])
                #expect(output.status == 0, "\(output.stderr)")
                #expect(try Data(contentsOf: folder.appending(path: "a.bin")) == Data(Self.body))
                #expect(output.stdout.contains("2 files: 2 completed, 0 failed"))
                #expect(!output.stdout.contains("\u{1B}"), "no escape codes when not on a terminal")
            }
        }
    }

    @Test func httpsFromAPrivateAuthorityNeedsItsCertificateOrInsecureAndSaysWhyOtherwise() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a.bin": .init(body: Self.body)], tls: true) { server in
            try await self.withFolder { folder in
                let url = server.url("/a.bin").absoluteString
                let untrusted = try await HaulProcess.run(["get", url, "-d", folder.appending(path: "1").path, "-q"])
                #expect(untrusted.status == 1)
                #expect(untrusted.stdout.contains("TLS handshake with 127.0.0.1:\(server.port) failed: "))
                #expect(untrusted.stdout.contains("CERTIFICATE_VERIFY_FAILED"), "\(untrusted.stdout)")

                let authority = folder.appending(path: "authority.pem")
                try Data(TestCertificates.authority.utf8).write(to: authority)
                let trusted = try await HaulProcess.run([
                    "get", url, "-d", folder.appending(path: "2").path, "--ca-certificate", authority.path,
                ])
                #expect(trusted.status == 0, "\(trusted.stdout) \(trusted.stderr)")
                #expect(try Data(contentsOf: folder.appending(path: "2/a.bin")) == Data(Self.body))

                let insecure = try await HaulProcess.run(["get", url, "-d", folder.appending(path: "3").path, "-k"])
                #expect(insecure.status == 0, "\(insecure.stdout) \(insecure.stderr)")

                let missing = try await HaulProcess.run(["get", url, "--ca-certificate", "/nonexistent.pem"])
                #expect(missing.status == 64)
                #expect(missing.stderr.contains("--ca-certificate: cannot read /nonexistent.pem"))
            }
        }
    }

    @Test func credentialsInAURLAreSentAsBasicAuthorizationButNeitherPrintedNorStored() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a.bin": .init(body: Self.body)]) { server in
            try await self.withFolder { folder in
                let url = "http://user:s3cret@127.0.0.1:\(server.port)/a.bin"
                let state = folder.appending(path: "state")
                let output = try await HaulProcess.run(
                    ["get", url, "-d", folder.appending(path: "out").path],
                    stateHome: state
                )
                #expect(output.status == 0, "\(output.stderr)")
                #expect(server.requests.first?.headers["authorization"] == "Basic dXNlcjpzM2NyZXQ=")
                #expect(!output.stdout.contains("s3cret") && !output.stderr.contains("s3cret"))
                #expect(output.stdout.contains("http://127.0.0.1:\(server.port)/a.bin"))
                var stored = ""
                for name in (try? FileManager.default.subpathsOfDirectory(atPath: state.path)) ?? [] {
                    stored +=
                        (try? String(contentsOfFile: state.appending(path: name).path, encoding: .isoLatin1)) ?? ""
                }
                #expect(!stored.isEmpty, "the state database was written")
                #expect(!stored.contains("s3cret"), "the password is not in the state database")
            }
        }
    }

    @Test func exitsOneAndNamesEveryFailedURLWithItsReason() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a.bin": .init(body: Self.body)]) { server in
            try await self.withFolder { folder in
                let missing = server.url("/missing").absoluteString
                let output = try await HaulProcess.run([
                    "get", server.url("/a.bin").absoluteString, missing, "-d", folder.path,
                ])
                #expect(output.status == 1)
                #expect(output.stdout.contains("FAILED \(missing): The server answered 404 Not Found [HTTP 404]"))
            }
        }
    }

    @Test func withQuietPrintsTheFailuresAndNothingAboutTheFilesThatCompleted() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a.bin": .init(body: Self.body)]) { server in
            try await self.withFolder { folder in
                let missing = server.url("/missing").absoluteString
                let output = try await HaulProcess.run([
                    "get", server.url("/a.bin").absoluteString, missing, "-d", folder.path, "-q",
                ])
                #expect(output.status == 1)
                let lines = output.stdout.split(separator: "\n").map(String.init)
                #expect(lines.contains("failed    \(missing): The server answered 404 Not Found"))
                #expect(lines.contains("FAILED \(missing): The server answered 404 Not Found [HTTP 404]"))
                #expect(lines.count == 2, "\(lines)")
                #expect(try Data(contentsOf: folder.appending(path: "a.bin")) == Data(Self.body))
            }
        }
    }

    @Test func exitsSixtyFourOnBadUsageAndOnABadInputFileWithoutDownloading() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a.bin": .init(body: Self.body)]) { server in
            try await self.withFolder { folder in
                #expect(
                    try await HaulProcess.run(["get", "-j", "0", server.url("/a.bin").absoluteString]).status == 64
                )
                let list = "\(server.url("/a.bin").absoluteString)\n  colour=blue\n"
                let output = try await HaulProcess.run(["get", "-i", "-", "-d", folder.path], stdin: list)
                #expect(output.status == 64)
                #expect(output.stderr.contains("line 2: unknown option \"colour\""))
                #expect(server.requests.isEmpty)
                // The state database opens while the list is read; when both fail, the list's error is the one told.
                let both = try await HaulProcess.run(
                    ["get", "-i", "-", "-d", folder.path, "--state", "/dev/null/state.sqlite"],
                    stdin: list
                )
                #expect(both.status == 64)
                #expect(both.stderr.contains("line 2: unknown option \"colour\""))
                #expect(try await HaulProcess.run(["get", "-i", folder.appending(path: "nope.txt").path]).status == 64)
            }
        }
    }

    @Test func getAnswersHelpVersionAndMistakesAsACommandOfTheHaulTool() async throws {
        let help = try await HaulProcess.run(["get", "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("USAGE: haul get [<options>] [<urls> ...]"))
        let version = try await HaulProcess.run(["get", "--version"])
        #expect(version.status == 0 && version.stdout == "0.1.0\n")
        let mistake = try await HaulProcess.run(["get", "http://127.0.0.1:9/a", "--bogus"])
        #expect(mistake.status == 64)
        #expect(mistake.stderr.contains("Unknown option '--bogus'"))
        #expect(mistake.stderr.contains("See 'haul get --help' for more information."))
        let completion = try await HaulProcess.run(["get", "--generate-completion-script", "bash"])
        #expect(completion.status == 0 && completion.stdout.contains("_haul()"))
    }

    @Test func readsAnInputFileWithPerItemOptions() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a.bin": .init(body: Self.body)]) { server in
            try await self.withFolder { folder in
                let list = """
                    # photos
                    \(server.url("/a.bin").absoluteString)
                      out=renamed.bin
                      dir=sub/dir
                      header=X-Token: secret
                    """
                let file = folder.appending(path: "list.txt")
                try list.write(to: file, atomically: true, encoding: .utf8)
                let output = try await HaulProcess.run([
                    "get", "-i", file.path, "-d", folder.appending(path: "out").path,
                ])
                #expect(output.status == 0, "\(output.stderr)")
                #expect(try Data(contentsOf: folder.appending(path: "out/sub/dir/renamed.bin")) == Data(Self.body))
                #expect(server.requests.first?.headers["x-token"] == "secret")
            }
        }
    }

    @Test func readsAListFromStandardInput() async throws {
        try await FaultInjectingServer.withServer(resources: [
            "/a.bin": .init(body: Self.body), "/b.bin": .init(body: [7]),
        ]) {
            server in
            try await self.withFolder { folder in
                let list = "\(server.url("/a.bin").absoluteString)\n# comment\n\(server.url("/b.bin").absoluteString)\n"
                let output = try await HaulProcess.run(["get", "-i", "-", "-d", folder.path], stdin: list)
                #expect(output.status == 0, "\(output.stderr)")
                #expect(try Data(contentsOf: folder.appending(path: "a.bin")) == Data(Self.body))
                #expect(try Data(contentsOf: folder.appending(path: "b.bin")) == Data([7]))
            }
        }
    }

    @Test func aListLongerThanOneSliceIsDownloadedWholeWithEachItemsOwnOptions() async throws {
        // 70 items: two whole slices of 32 requests added to the batch at once, and the six left at the end.
        let bodies = (0..<70).map { FaultInjectingServer.body(size: 100 + $0, seed: UInt64(500 + $0)) }
        let resources = Dictionary(
            uniqueKeysWithValues: bodies.indices.map { ("/f\($0)", FaultInjectingServer.Resource(body: bodies[$0])) }
        )
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await self.withFolder { folder in
                let list = bodies.indices.map { "\(server.url("/f\($0)").absoluteString)\n  out=n\($0).bin" }
                    .joined(separator: "\n")
                let output = try await HaulProcess.run(
                    ["get", "-i", "-", "-d", folder.path, "-j", "8", "--no-state"],
                    stdin: list
                )
                #expect(output.status == 0, "\(output.stderr)")
                #expect(output.stdout.contains("70 files: 70 completed, 0 failed"), "\(output.stdout)")
                for index in bodies.indices {
                    #expect(try Data(contentsOf: folder.appending(path: "n\(index).bin")) == Data(bodies[index]))
                }
                #expect(server.requests.count == 70)
            }
        }
    }

    @Test func writesOneJSONEventPerLineAndNothingElseOnStandardOutput() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a.bin": .init(body: Self.body)]) { server in
            try await self.withFolder { folder in
                let output = try await HaulProcess.run(
                    [
                        "get", server.url("/a.bin").absoluteString, server.url("/nope").absoluteString, "-d",
                        folder.path, "--json",
                    ])
                #expect(output.status == 1)
                let events = try output.stdout.split(separator: "\n").map { line in
                    try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                }
                let kinds = events.compactMap { $0["event"] as? String }
                #expect(kinds.filter { $0 == "queued" }.count == 2)
                #expect(kinds.contains("completed"))
                #expect(kinds.last == "finished")
                let failed = try #require(events.first { $0["event"] as? String == "failed" })
                let error = try #require(failed["error"] as? [String: Any])
                #expect(error["code"] as? String == "httpStatus")
                #expect(error["status"] as? Int == 404)
                let completed = try #require(events.first { $0["event"] as? String == "completed" })
                #expect(completed["bytes"] as? Int == Self.body.count)
                #expect(completed["id"] != nil && completed["url"] != nil && completed["path"] != nil)
                #expect(output.stderr.contains("2 files: 1 completed, 1 failed"))
            }
        }
    }

    @Test func retriesAsOftenAsToldAndReportsEachRetryInJSON() async throws {
        let flaky = FaultInjectingServer.Resource(body: Self.body, faults: [.status(503), .status(503)])
        try await FaultInjectingServer.withServer(resources: ["/flaky": flaky]) { server in
            try await self.withFolder { folder in
                let url = server.url("/flaky").absoluteString
                let once = try await HaulProcess.run(["get", url, "-d", folder.path, "--retries", "0"])
                #expect(once.status == 1)
                let output = try await HaulProcess.run(["get", url, "-d", folder.path, "--retries", "2", "--json"])
                #expect(output.status == 0, "\(output.stderr)")
                let retries = output.stdout.split(separator: "\n").filter { $0.contains(#""event":"retrying""#) }
                #expect(retries.count == 1, "the first run used up one fault, so one retry is left")
                #expect(retries.first?.contains(#""status":503"#) == true)
            }
        }
    }

    @Test func exits130WhenInterruptedAndLeavesNoFinishedFileBehind() async throws {
        let slow = FaultInjectingServer.Resource(
            body: FaultInjectingServer.body(size: 2_000_000, seed: 1),
            chunkSize: 10_000,
            chunkDelay: .milliseconds(20)
        )
        try await FaultInjectingServer.withServer(resources: ["/slow.bin": slow]) { server in
            try await self.withFolder { folder in
                let process = HaulProcess.makeProcess([
                    "get", server.url("/slow.bin").absoluteString, "-d", folder.path, "--json",
                ])
                let out = Pipe()
                process.standardOutput = out
                process.standardError = FileHandle.nullDevice
                let (end, stopping) = try HaulProcess.launch(process)
                defer { stopping.cancel() }
                await HaulProcess.blocking {
                    var seen = ""
                    while !seen.contains("\"progress\"") {
                        let data = out.fileHandleForReading.availableData
                        if data.isEmpty { break }
                        seen += String(decoding: data, as: UTF8.self)
                    }
                    process.interrupt()
                    _ = out.fileHandleForReading.readDataToEndOfFile()
                }
                await end.wait()
                #expect(process.terminationStatus == 130)
                #expect(!FileManager.default.fileExists(atPath: folder.appending(path: "slow.bin").path))
            }
        }
    }
}
