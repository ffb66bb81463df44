import ArgumentParser
import Foundation
import Haul
import Testing

@testable import HaulCommand

@Suite("Parsing input files")
struct InputFileTests {
    func parse(_ text: String) throws(InputFileError) -> [InputItem] {
        var parser = InputFileParser()
        var items: [InputItem] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if let item = try parser.feed(line) { items.append(item) }
        }
        if let item = parser.finish() { items.append(item) }
        return items
    }

    @Test func readsURLsCommentsAndIndentedOptions() throws {
        let items = try self.parse(
            """
            # a comment
            https://example.com/a.zip
              out=renamed.zip
              dir=sub
            \tchecksum=sha-256=\(String(repeating: "ab", count: 32))
              header=Authorization: Bearer x
              header=X-Trace: 1

            http://example.com/b
            """
        )
        #expect(items.count == 2)
        #expect(items[0].url.absoluteString == "https://example.com/a.zip")
        #expect(items[0].outputName == "renamed.zip")
        #expect(items[0].directory == "sub")
        #expect(items[0].checksum?.algorithm == .sha256)
        #expect(items[0].headers.map(\.name) == ["Authorization", "X-Trace"])
        #expect(items[1].lineNumber == 9)
        #expect(items[1].outputName == nil)
    }

    @Test(arguments: [
        ("  out=x", 1, "an option comes before any URL"),
        ("http://h/a\n  out", 2, "expected key=value"),
        ("http://h/a\n  color=red", 2, "unknown option"),
        ("http://h/a\n  out=../x", 2, "out= takes a file name"),
        ("http://h/a\n  dir=../x", 2, "dir= relative to -d cannot contain .."),
        ("http://h/a\n  dir=sub/../../up", 2, "dir= relative to -d cannot contain .."),
        ("http://h/a\n  checksum=sha-256=zz", 2, "checksum= takes"),
        ("http://h/a\n  header=NoColon", 2, "header= takes"),
        ("http://h/a\n\nftp://h/b", 3, "only http and https"),
        ("not a url", 1, "not an absolute URL"),
    ])
    func reportsTheLineOfABadEntry(text: String, line: Int, message: String) {
        #expect {
            _ = try self.parse(text)
        } throws: { error in
            guard let error = error as? InputFileError else { return false }
            return error.lineNumber == line && error.message.contains(message)
        }
    }

    @Test func aDirectoryStaysUnderTheFolderUnlessItIsNamedByItsAbsolutePath() throws {
        let items = try self.parse("http://h/a\n  dir=2024/./summer\nhttp://h/b\n  dir=/srv/elsewhere")
        #expect(items.map(\.directory) == ["2024/./summer", "/srv/elsewhere"])
    }

    @Test(arguments: [
        ("http://h/r%C3%A9sum%C3%A9%201.txt", "http://h/r%C3%A9sum%C3%A9%201.txt"),
        ("http://h/résumé 1.txt", "http://h/r%C3%A9sum%C3%A9%201.txt"),
        ("http://h/résumé%201.txt", "http://h/r%C3%A9sum%C3%A9%201.txt"),
        ("http://h/100%.txt", "http://h/100%25.txt"),
        ("http://h/a?q=a b&r=%7E#top", "http://h/a?q=a%20b&r=%7E#top"),
    ])
    func aURLAsAPersonWritesItIsEncodedOnceKeepingItsEscapes(text: String, expected: String) {
        #expect(InputFileParser.parse(text)?.absoluteString == expected)
    }

    @Test func readsAListSavedWithAByteOrderMarkAndWindowsLineEnds() throws {
        var parser = InputFileParser()
        let lines = "\u{FEFF}https://a.example/1\r\n\tout=one.bin\r\n\r\nhttps://a.example/2\r\n"
        var items: [InputItem] = []
        for line in lines.split(separator: "\r\n", omittingEmptySubsequences: false) {
            if let item = try parser.feed(line) { items.append(item) }
        }
        if let last = parser.finish() { items.append(last) }
        #expect(items.map(\.url.absoluteString) == ["https://a.example/1", "https://a.example/2"])
        #expect(items.first?.outputName == "one.bin")
    }

    @Test func credentialsInAURLBecomeABasicAuthorizationAndLeaveTheURL() {
        let url = URL(string: "https://user:p%40ss@example.com:8443/a/b.bin?x=1")!
        let (bare, headers) = URLCredentials.apply(to: url, headers: [("X-Trace", "1")])
        #expect(bare.absoluteString == "https://example.com:8443/a/b.bin?x=1")
        #expect(headers.map(\.name) == ["X-Trace", "Authorization"])
        // user:p@ss
        #expect(headers.last?.value == "Basic dXNlcjpwQHNz")
        let given = URLCredentials.apply(to: url, headers: [("authorization", "Bearer t")])
        #expect(given.url == bare)
        #expect(given.headers.map(\.value) == ["Bearer t"], "a header given wins")
        let plain = URL(string: "https://example.com/a?mail=a@b.example")!
        #expect(URLCredentials.apply(to: plain, headers: []).url == plain)
        #expect(URLCredentials.apply(to: plain, headers: []).headers.isEmpty)
    }

    @Test func refusesHeaderValuesThatCouldSmuggleAnotherHeader() {
        #expect(HTTPHeaderLine(parsing: "X-A: 1\r\nX-B: 2") == nil)
        #expect(HTTPHeaderLine(parsing: "Bad Name: 1") == nil)
        #expect(HTTPHeaderLine(parsing: "X-A:  spaced ")?.value == "spaced")
    }
}

@Suite("Reading a checked input file")
struct CheckedInputTests {
    @discardableResult
    func withList<T>(of count: Int, _ body: (String) async throws -> T) async throws -> T {
        let path = FileManager.default.temporaryDirectory.appending(path: "haul-list-\(UUID().uuidString).txt").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let text = (0..<count).map { "https://example.com/\($0).bin\n  out=f\($0)" }.joined(separator: "\n")
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        return try await body(path)
    }

    func items(of input: CheckedInput) async throws -> [InputItem] {
        var items: [InputItem] = []
        try await input.forEachItem { items.append($0) }
        return items
    }

    @Test func aListWithinTheLimitIsParsedOnceAndKept() async throws {
        try await self.withList(of: 3) { path in
            let input = try CheckedInput.open(path)
            // The file is gone: the items come from the check.
            try FileManager.default.removeItem(atPath: path)
            #expect(input.itemCount == 3)
            let items = try await self.items(of: input)
            #expect(items.map(\.url.absoluteString) == (0..<3).map { "https://example.com/\($0).bin" })
            #expect(items.map(\.outputName) == ["f0", "f1", "f2"])
            #expect(items.map(\.lineNumber) == [1, 3, 5])
        }
    }

    @Test func aLongerListIsReadAgainAsAStream() async throws {
        let count = CheckedInput.keptItems + 1
        try await self.withList(of: count) { path in
            let input = try CheckedInput.open(path)
            #expect(input.itemCount == count)
            // Read again from the file: a line appended after the check is there.
            let handle = try #require(FileHandle(forWritingAtPath: path))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data("\nhttps://example.com/appended".utf8))
            try handle.close()
            let items = try await self.items(of: input)
            #expect(items.count == count + 1)
            #expect(items.first?.outputName == "f0")
            #expect(items[count - 1].outputName == "f\(count - 1)")
            #expect(items.last?.url.absoluteString == "https://example.com/appended")
        }
    }

    @Test func anItemTheCommandRefusesFailsTheCheckWithUsageExitCode() async throws {
        try await self.withList(of: 2) { path in
            #expect(throws: ExitCode(64)) {
                try CheckedInput.open(path) { $0.outputName == "f1" ? "no out= here" : nil }
            }
        }
    }
}

@Suite("Parsing the get command's arguments")
struct GetArgumentTests {
    @Test func acceptsTheDocumentedOptions() throws {
        let command = try #require(
            try HaulCommand.parseAsRoot([
                "get", "http://h/a", "-d", "out", "-o", "x.bin", "-j", "8", "--max-per-host", "2", "-H", "A: b",
                "--checksum", "md5=" + String(repeating: "0", count: 32), "--on-conflict", "skip",
                "--content-disposition",
                "--json", "--retries", "2", "--timeout", "1.5", "--connect-timeout", "2.5", "--max-redirs", "3", "-A",
                "archiver/2",
            ]) as? Get
        )
        let configuration = command.options.configuration(store: nil)
        #expect(configuration.connectTimeout == .milliseconds(2_500))
        #expect(configuration.maximumRedirects == 3)
        #expect(configuration.userAgent == "archiver/2")
        let plain = try #require(try HaulCommand.parseAsRoot(["get", "http://h/a"]) as? Get)
        #expect(plain.options.configuration(store: nil).userAgent == TransferManager.Configuration().userAgent)
        #expect(plain.options.configuration(store: nil).connectTimeout == .seconds(10))
        #expect(command.options.retries == 2)
        #expect(command.options.timeout == 1.5)
        #expect(command.options.maxConcurrent == 8)
        #expect(command.options.maxPerHost == 2)
        #expect(command.options.configuration(store: nil).maximumTransfersPerHost == 2)
        #expect(command.output == "x.bin")
        #expect(command.options.json)
    }

    @Test(arguments: [
        ["--connect-timeout", "0"], ["--max-redirs", "-1"], ["--max-redirs", "101"], ["-A", "two\r\nX-Injected: 1"],
        ["--proxy", "socks5://h:1"], ["--netrc", "--netrc-file", "f"],
    ])
    func refusesOptionsItCannotUse(arguments: [String]) {
        #expect(throws: (any Error).self) { try HaulCommand.parseAsRoot(["get", "http://h/a"] + arguments) }
    }

    @Test func oneHostMayHaveAsManyTransfersAsJAsksForUnlessTheLimitIsGiven() throws {
        for (arguments, perHost) in [([String](), 4), (["-j", "16"], 16), (["-j", "16", "--max-per-host", "6"], 6)] {
            let command = try #require(try HaulCommand.parseAsRoot(["get", "http://h/a"] + arguments) as? Get)
            let configuration = command.options.configuration(store: nil)
            #expect(configuration.maximumTransfersPerHost == perHost, "\(arguments)")
            #expect(configuration.maximumConcurrentTransfers == (arguments.count >= 2 ? 16 : 4), "\(arguments)")
        }
    }

    @Test(arguments: [
        ["get"],
        ["get", "http://h/a", "-j", "0"],
        ["get", "http://h/a", "-j", "1000"],
        ["get", "http://h/a", "http://h/b", "-o", "x"],
        ["get", "http://h/a", "-o", "../x"],
        ["get", "http://h/a", "--checksum", "sha-256=12"],
        ["get", "http://h/a", "--on-conflict", "merge"],
        ["get", "http://h/a", "-H", "nocolon"],
        ["get", "http://h/a", "--json", "--quiet"],
        ["get", "file:///etc/passwd"],
        ["get", "http://h/a", "--max-per-host", "0"],
        ["get", "http://h/a", "--retries", "-1"],
        ["get", "http://h/a", "--timeout", "0"],
        ["get", "http://h/a", "--timeout", "soon"],
        ["get", "http://h/a", "--limit-rate", "fast"],
    ])
    func rejectsBadUsage(arguments: [String]) {
        #expect(throws: (any Error).self) { try HaulCommand.parseAsRoot(arguments) }
        #expect(HaulCommand.exitCode(for: ValidationError("x")).rawValue == 64)
        // Not parsed on its own either: the root tells what is wrong, as it always did.
        #expect(HaulCommand.parsedGet(["haul"] + arguments) == nil)
    }

    @Test func aPlainGetIsParsedOnItsOwnIntoWhatTheRootWouldParse() throws {
        for arguments in [
            ["get", "http://h/a"],
            ["get", "-i", "list.txt", "-d", "out", "-j", "16", "-q", "--no-state"],
            ["get", "http://h/a", "-o", "x.bin", "--checksum", "md5=" + String(repeating: "0", count: 32), "--json"],
            ["get", "--state", "s.sqlite", "--retries", "2", "--", "http://h/a"],
        ] {
            let alone = try #require(HaulCommand.parsedGet(["haul"] + arguments), "\(arguments)")
            let fromRoot = try #require(try HaulCommand.parseAsRoot(arguments) as? Get)
            #expect(alone.urls == fromRoot.urls, "\(arguments)")
            #expect(
                alone.inputFile == fromRoot.inputFile && alone.dir == fromRoot.dir && alone.output == fromRoot.output
            )
            #expect(alone.checksum == fromRoot.checksum && alone.state.disabled == fromRoot.state.disabled)
            #expect(alone.state.path == fromRoot.state.path)
            #expect(alone.options.maxConcurrent == fromRoot.options.maxConcurrent)
            #expect(alone.options.retries == fromRoot.options.retries && alone.options.json == fromRoot.options.json)
            #expect(alone.options.quiet == fromRoot.options.quiet)
        }
    }

    @Test(arguments: [
        ["get", "--help"], ["get", "-h"], ["get", "--help-hidden"], ["get", "--version"],
        ["get", "--generate-completion-script", "bash"], ["get", "http://h/a", "--generate-completion-script"],
        ["get", "--experimental-dump-help"], ["help", "get"], ["put", "a.bin", "--to", "http://h/"], ["--help"], [],
    ])
    func anythingButAPlainGetGoesThroughTheRoot(arguments: [String]) {
        #expect(HaulCommand.parsedGet(["haul"] + arguments) == nil)
    }
}

@Suite("Parsing rates")
struct RateTests {
    @Test(arguments: [
        ("800", Int64(800)), ("500K", 512_000), ("500k", 512_000), ("2M", 2_097_152), ("1.5G", 1_610_612_736),
        ("2MiB", 2_097_152), ("100KB/s", 102_400),
    ])
    func readsRatesAsPeopleWriteThem(text: String, bytes: Int64) {
        #expect(Rate.parse(text) == bytes)
    }

    @Test(arguments: ["", "K", "-1M", "0", "fast", "1.2.3M", "9999999999G", "1T"])
    func refusesWhatIsNotARate(text: String) {
        #expect(Rate.parse(text) == nil)
    }
}

@Suite("Rendering output")
struct RenderingTests {
    @Test(arguments: [
        (Int64(0), "0 B"), (Int64(1023), "1023 B"), (Int64(1024), "1.00 KiB"), (Int64(1_572_864), "1.50 MiB"),
        (Int64(123 * 1024 * 1024), "123 MiB"),
    ])
    func formatsByteCounts(count: Int64, expected: String) {
        #expect(Formatting.bytes(count) == expected)
    }

    @Test func formatsByteCountsAsTheCFormatDoes() {
        var counts: [Int64] = Array(stride(from: 1024, through: 1024 * 1030, by: 97))
        counts += [1_048_063, 1_048_064, 1_048_575, 1_152, 1_280, 10_188, 10_189, 102_348, 102_349, 1 << 40, 1 << 50]
        for count in counts {
            let (value, unit) = Formatting.scaled(count)
            let digits = Formatting.digits(for: value)
            #expect(Formatting.bytes(count) == String(format: "%.\(digits)f %@", value, unit), "\(count)")
        }
    }

    @Test func formatsDurations() {
        #expect(Formatting.duration(.milliseconds(400)) == "0.4s")
        #expect(Formatting.duration(.seconds(42)) == "42s")
        #expect(Formatting.duration(.seconds(185)) == "3m05s")
        #expect(Formatting.duration(.seconds(7620)) == "2h07m")
    }

    @Test func countsOneFileInTheSingular() {
        #expect(Formatting.count(0, "file") == "0 files")
        #expect(Formatting.count(1, "file") == "1 file")
        #expect(Formatting.count(2, "file") == "2 files")
    }

    @Test func writesAProgressLineWithCountsBytesSpeedAndTimeLeft() {
        let progress = BatchProgress(
            totalFiles: 200,
            completedFiles: 12,
            failedFiles: 3,
            cancelledFiles: 0,
            skippedFiles: 0,
            transferredBytes: 1_048_576,
            expectedBytes: 4_194_304,
            knownExpectedBytes: 4_194_304,
            filesOfUnknownSize: 0,
            fractionCompleted: 0.25,
            bytesPerSecond: 1_048_576,
            estimatedTimeRemaining: .seconds(3)
        )
        #expect(
            EventRenderer.progressLine(progress)
                == "progress  12/200 files, 3 failed, 1.00 MiB of 4.00 MiB (25%), 1.00 MiB/s, 3.0s left"
        )
        var early = progress
        early.bytesPerSecond = 0
        early.estimatedTimeRemaining = nil
        #expect(EventRenderer.progressLine(early) == "progress  12/200 files, 3 failed, 1.00 MiB of 4.00 MiB (25%)")
    }

    @Test func writesPlainProgressLinesAtMostEveryInterval() {
        var renderer = EventRenderer(mode: .plain(progressEvery: .seconds(2)))
        let progress = BatchProgress(
            totalFiles: 2,
            completedFiles: 0,
            failedFiles: 0,
            cancelledFiles: 0,
            skippedFiles: 0,
            transferredBytes: 1,
            expectedBytes: nil,
            knownExpectedBytes: 0,
            filesOfUnknownSize: 2,
            fractionCompleted: 0.1,
            bytesPerSecond: 0,
            estimatedTimeRemaining: nil
        )
        let now = ContinuousClock.now
        #expect(renderer.lines(for: .progressed(progress), at: now).count == 1)
        #expect(renderer.lines(for: .progressed(progress), at: now + .seconds(1)).isEmpty)
        #expect(renderer.lines(for: .progressed(progress), at: now + .seconds(2)).count == 1)
    }

    @Test func writesFailuresAsJSONWithCodeMessageAndStatus() {
        let event = BatchEvent.transfer(
            TransferEvent(
                id: "t1",
                url: URL(string: "http://h/a")!,
                kind: .finished(.failed(HaulError(.httpStatus, "The server answered 404 Not Found", httpStatus: 404)))
            )
        )
        let line = JSONEvent.make(event)?.encoded()
        #expect(
            line
                == #"{"error":{"code":"httpStatus","message":"The server answered 404 Not Found","status":404},"event":"failed","id":"t1","url":"http://h/a"}"#
        )
    }

    @Test func theSummaryCountsTheSpeedOfWhatThisRunTransferredAndSaysHowMuchEarlierRunsFetched() {
        let mib: Int64 = 1_048_576
        let file = CompletedFile(path: URL(filePath: "/tmp/a.bin"), byteCount: 1024 * mib, sha256: nil)
        let report = BatchReport(
            batchID: BatchID(1),
            items: [BatchReport.Item(id: "a", url: URL(string: "http://h/a")!, result: .completed(file))]
        )
        #expect(
            Summary.lines(for: report, elapsed: .seconds(2), transferredBytes: 1024 * mib).first
                == "1 file: 1 completed, 0 failed; 1.00 GiB in 2.0s (512 MiB/s)"
        )
        #expect(
            Summary.lines(for: report, elapsed: .seconds(2), transferredBytes: 624 * mib).first
                == "1 file: 1 completed, 0 failed; 1.00 GiB (400 MiB of it from earlier runs) in 2.0s (312 MiB/s)"
        )
        #expect(
            Summary.lines(for: report, elapsed: .seconds(2), transferredBytes: 0).first
                == "1 file: 1 completed, 0 failed; 1.00 GiB (all of it from earlier runs) in 2.0s"
        )
    }

    @Test func aURLListedTwiceIsOneFilesBytesAndNoneOfThemFromEarlierRuns() {
        let file = CompletedFile(path: URL(filePath: "/tmp/a.bin"), byteCount: 18, sha256: nil)
        let item = BatchReport.Item(id: "a", url: URL(string: "http://h/a")!, result: .completed(file))
        let report = BatchReport(batchID: BatchID(1), items: [item, item])
        #expect(report.tally.completed == 2)
        #expect(report.tally.completedBytes == 18)
        #expect(
            Summary.lines(for: report, elapsed: .seconds(1), transferredBytes: 18).first
                == "2 files: 2 completed, 0 failed; 18 B in 1.0s (18 B/s)"
        )
    }

    @Test func anInterruptedRunSaysWhatItLeftAndHowToGoOn() {
        let file = CompletedFile(path: URL(filePath: "/tmp/a.bin"), byteCount: 18, sha256: nil)
        let done = BatchReport.Item(id: "a", url: URL(string: "http://h/a")!, result: .completed(file))
        let left = BatchReport.Item(id: "b", url: URL(string: "http://h/b")!, result: .cancelled)
        let report = BatchReport(batchID: BatchID(1), items: [done, left])
        #expect(
            Summary.interruptionLine(for: report, keepsState: true)
                == "haul: interrupted with 1 file unfinished; run the same command again to continue "
                + "(the partial files and the state are kept)"
        )
        #expect(
            Summary.interruptionLine(for: report, keepsState: false)
                == "haul: interrupted with 1 file unfinished (not kept: --no-state)"
        )
        #expect(Summary.interruptionLine(for: BatchReport(batchID: BatchID(1), items: [done]), keepsState: true) == nil)
    }

    @Test func transferredBytesAreEachCompletedFileLessWhatWasThereAtItsFirstStartInTheRun() {
        func event(_ id: TransferID, _ kind: TransferEvent.Kind) -> BatchEvent {
            .transfer(TransferEvent(id: id, url: URL(string: "http://h/\(id)")!, kind: kind))
        }
        let done = TransferResult.completed(CompletedFile(path: URL(filePath: "/tmp/x"), byteCount: 5000, sha256: nil))
        var transferred = TransferredBytes()
        let events: [BatchEvent] = [
            // Resumed at 1000, retried at 3000 (bytes this run fetched): 4000 moved.
            event("a", .started(offset: 1000)), event("a", .started(offset: 3000)), event("a", .finished(done)),
            // Resumed at 2000, but the server ignored the range: all 5000 moved.
            event("b", .started(offset: 2000)), event("b", .restarted(reason: "200 to a Range request")),
            event("b", .started(offset: 0)), event("b", .finished(done)),
            // Resumed at 700, then failed: not a completed file's bytes.
            event("c", .started(offset: 700)), event("c", .finished(.failed(HaulError(.incompleteBody, "cut")))),
            // Completed by an earlier run, found unchanged: never started here.
            event("d", .finished(done)),
        ]
        for item in events { transferred.note(item) }
        #expect(transferred.total == 9000)
    }
}
