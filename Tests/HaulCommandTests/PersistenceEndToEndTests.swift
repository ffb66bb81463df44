import Foundation
import Haul
import HaulTesting
import Testing

@Suite("The state database, end to end", .timeLimit(.minutes(3)))
struct PersistenceEndToEndTests {
    static let files = (0..<4).map { FaultInjectingServer.body(size: 300_000 + $0 * 1_000, seed: UInt64(100 + $0)) }

    /// Paced resources: each file takes about half a second, so a process can be stopped in the middle.
    static func resources() -> [String: FaultInjectingServer.Resource] {
        Dictionary(
            uniqueKeysWithValues: self.files.enumerated().map { index, body in
                (
                    "/f\(index).bin",
                    FaultInjectingServer.Resource(body: body, chunkSize: 8_192, chunkDelay: .milliseconds(12))
                )
            }
        )
    }

    func withFolder<T>(_ body: (URL) async throws -> T) async throws -> T {
        let url = FileManager.default.temporaryDirectory.appending(path: "haul-e2e-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: url) }
        return try await body(url)
    }

    /// Starts `haul get --json` on every file, waits until `stopAfter` progress lines were printed, then sends
    /// `signal` and waits for the process to end.
    func interruptedRun(
        _ server: FaultInjectingServer,
        folder: URL,
        signal: Int32,
        stopAfter progressLines: Int,
        event: String = "progress"
    ) async throws -> Int32 {
        let urls = Self.files.indices.map { server.url("/f\($0).bin").absoluteString }
        return try await self.interrupted(
            ["get"] + urls + ["-d", folder.appending(path: "out").path, "-j", "2"],
            folder: folder,
            signal: signal,
            stopAfter: progressLines,
            event: event
        ).status
    }

    /// Starts `arguments` with `--json`, waits until `count` lines of `event` were printed, then sends `signal` and
    /// waits for the process to end; returns its status and every line it printed.
    func interrupted(
        _ arguments: [String],
        folder: URL,
        signal: Int32,
        stopAfter count: Int,
        event: String
    ) async throws -> (status: Int32, output: String) {
        let process = HaulProcess.makeProcess(arguments + ["--json"], stateHome: folder.appending(path: "state"))
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        let (end, stopping) = try HaulProcess.launch(process)
        defer { stopping.cancel() }
        let output = await HaulProcess.blocking {
            var seen = 0
            var buffer = ""
            while seen < count {
                let data = out.fileHandleForReading.availableData
                if data.isEmpty { break }
                buffer += String(decoding: data, as: UTF8.self)
                seen = buffer.components(separatedBy: "\"event\":\"\(event)\"").count - 1
            }
            kill(process.processIdentifier, signal)
            return buffer + String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }
        await end.wait()
        return (process.terminationStatus, output)
    }

    func rerun(_ server: FaultInjectingServer, folder: URL) async throws -> HaulProcess.Output {
        let urls = Self.files.indices.map { server.url("/f\($0).bin").absoluteString }
        return try await HaulProcess.run(
            ["get"] + urls + ["-d", folder.appending(path: "out").path, "-j", "2"],
            stateHome: folder.appending(path: "state")
        )
    }

    func expectEveryFileIdentical(_ folder: URL) throws {
        for (index, body) in Self.files.enumerated() {
            #expect(try Data(contentsOf: folder.appending(path: "out/f\(index).bin")) == Data(body))
        }
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder.appending(path: "out").path)
        #expect(leftovers.sorted() == Self.files.indices.map { "f\($0).bin" })
    }

    @Test func ctrlCExits130KeepsPartialFilesAndTheSameCommandResumesThem() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources()) { server in
            try await self.withFolder { folder in
                let status = try await self.interruptedRun(server, folder: folder, signal: SIGINT, stopAfter: 6)
                #expect(status == 130)
                let partials = try FileManager.default.contentsOfDirectory(atPath: folder.appending(path: "out").path)
                #expect(partials.contains { $0.hasSuffix(".part") })

                let output = try await self.rerun(server, folder: folder)
                #expect(output.status == 0, "\(output.stderr)")
                try self.expectEveryFileIdentical(folder)
                #expect(server.requests.contains { $0.range != nil }, "partial files resumed with Range")
                #expect(output.stdout.contains("of it from earlier runs) in "), "the summary's speed leaves them out")
                let total = Self.files.reduce(0) { $0 + $1.count }
                #expect(server.servedBodyBytes <= total + 2 * 600_000, "no more than the unflushed tails again")
            }
        }
    }

    @Test func survivesKillNineAtSeveralPointsAndLosesNothing() async throws {
        // Kill points: before the first byte (at the first "started"), then in progress lines seen: at the first
        // bytes, in the first files, between files, near the end.
        for (stopAfter, event) in [
            (1, "started"), (1, "progress"), (5, "progress"), (12, "progress"), (30, "progress"),
        ] {
            try await FaultInjectingServer.withServer(resources: Self.resources()) { server in
                try await self.withFolder { folder in
                    let status = try await self.interruptedRun(
                        server,
                        folder: folder,
                        signal: SIGKILL,
                        stopAfter: stopAfter,
                        event: event
                    )
                    #expect(status == SIGKILL || status == 0 || status == 9)
                    let before = server.requests.count
                    let published = Set(
                        ((try? FileManager.default.contentsOfDirectory(atPath: folder.appending(path: "out").path))
                            ?? [])
                            .filter { !$0.hasSuffix(".part") }.map { "/" + $0 }
                    )
                    let output = try await self.rerun(server, folder: folder)
                    #expect(output.status == 0, "kill point \(stopAfter): \(output.stderr)")
                    try self.expectEveryFileIdentical(folder)
                    let askedAgain = server.requests.dropFirst(before).map(\.path).filter(published.contains)
                    #expect(
                        askedAgain.isEmpty,
                        "kill point \(stopAfter): a file the first run published is never fetched again"
                    )
                    let total = Self.files.reduce(0) { $0 + $1.count }
                    #expect(
                        server.servedBodyBytes <= total + 2 * 600_000,
                        "kill point \(stopAfter): only unflushed tails again"
                    )
                    let store = try TransferStore(path: folder.appending(path: "state/haul/state.sqlite"))
                    let batches = try store.batches()
                    #expect(
                        !batches.isEmpty
                            && batches.allSatisfy { $0.transferCounts.keys.allSatisfy { $0 == "completed" } }
                    )
                }
            }
        }
    }

    @Test func statusShowsTheInterruptedBatchAndResumeFinishesIt() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources()) { server in
            try await self.withFolder { folder in
                let state = folder.appending(path: "state")
                #expect(try await self.interruptedRun(server, folder: folder, signal: SIGTERM, stopAfter: 6) == 130)

                let status = try await HaulProcess.run(["status", "--json"], stateHome: state)
                #expect(status.status == 0)
                let batches = try status.stdout.split(separator: "\n").map {
                    try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
                }
                #expect(batches.count == 1)
                #expect(batches.first?["finished"] as? Bool == false)
                #expect(batches.first?["transfers"] as? Int == 4)
                let listed = try #require(batches.first?["items"] as? [[String: Any]])
                #expect(listed.count == 4)
                #expect(listed.allSatisfy { $0["state"] is String && $0["bytes"] is Int && $0["url"] is String })
                let text = try await HaulProcess.run(["status"], stateHome: state)
                let open = listed.filter { $0["state"] as? String != "completed" }.count
                #expect(
                    text.stdout.split(separator: "\n").count == 1 + open,
                    "a batch line and its files not completed"
                )

                let items = try await HaulProcess.run(["status", "1"], stateHome: state)
                #expect(items.stdout.split(separator: "\n").count == 4)
                #expect(try await HaulProcess.run(["status", "99"], stateHome: state).status == 64)

                let resumed = try await HaulProcess.run(["resume"], stateHome: state)
                #expect(resumed.status == 0, "\(resumed.stderr)")
                try self.expectEveryFileIdentical(folder)
                let after = try await HaulProcess.run(["status"], stateHome: state)
                #expect(after.stdout.contains("batch 1  finished"))
                #expect(try await HaulProcess.run(["resume"], stateHome: state).stdout.contains("Nothing to resume."))
                let pruned = try await HaulProcess.run(["status", "--prune"], stateHome: state)
                #expect(pruned.stdout.contains("Forgot 1 finished batch."))
                #expect(try await HaulProcess.run(["status"], stateHome: state).stdout.contains("No batches."))
            }
        }
    }

    @Test func aKilledRunOfFortyFilesIsFinishedByTheSameCommandAndNoFileItCompletedIsFetchedAgain() async throws {
        // Forty small files in one command: the store keeps most of them 32 to a slice, and each completion in its
        // slice (see Slices.swift); the rerun must find every one of them as the rows of a smaller list would be found.
        let bodies = (0..<40).map { FaultInjectingServer.body(size: 20_000 + $0, seed: UInt64(500 + $0)) }
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for (index, body) in bodies.enumerated() {
            resources["/g\(index).bin"] = FaultInjectingServer.Resource(
                body: body,
                chunkSize: 4_096,
                chunkDelay: .milliseconds(10)
            )
        }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await self.withFolder { folder in
                let urls = bodies.indices.map { server.url("/g\($0).bin").absoluteString }
                let arguments = ["get"] + urls + ["-d", folder.appending(path: "out").path, "-j", "4"]
                let (_, printed) = try await self.interrupted(
                    arguments,
                    folder: folder,
                    signal: SIGKILL,
                    stopAfter: 12,
                    event: "completed"
                )
                // The paths of the files each completed event names.
                let completed = Set(
                    printed.split(separator: "\n").filter { $0.contains("\"event\":\"completed\"") }.compactMap {
                        line in
                        urls.indices.first { line.contains("/g\($0).bin\"") }.map { "/g\($0).bin" }
                    }
                )
                #expect(completed.count >= 12, "\(completed.count) completed before the kill")
                #expect(completed.count < 40, "killed before the end")

                let before = server.requests.count
                let output = try await HaulProcess.run(arguments, stateHome: folder.appending(path: "state"))
                #expect(output.status == 0, "\(output.stderr)")
                for (index, body) in bodies.enumerated() {
                    #expect(try Data(contentsOf: folder.appending(path: "out/g\(index).bin")) == Data(body))
                }
                let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder.appending(path: "out").path)
                #expect(leftovers.count == 40, "no partial or renamed copies: \(leftovers.sorted())")
                let askedAgain = server.requests.dropFirst(before).map(\.path).filter(completed.contains)
                #expect(askedAgain.isEmpty, "a file the killed run completed is never fetched again: \(askedAgain)")
                let status = try await HaulProcess.run(["status"], stateHome: folder.appending(path: "state"))
                #expect(status.stdout.contains("40 files: 40 completed"), "\(status.stdout)")
            }
        }
    }

    @Test func resumeTakesTheOptionsOfGetAndSendsTheHeadersGiven() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources()) { server in
            try await self.withFolder { folder in
                let state = folder.appending(path: "state")
                #expect(try await self.interruptedRun(server, folder: folder, signal: SIGTERM, stopAfter: 6) == 130)
                let bad = try await HaulProcess.run(["resume", "--max-per-host", "0"], stateHome: state)
                #expect(bad.status == 64)
                #expect(bad.stderr.contains("--max-per-host must be between 1 and 256"), "\(bad.stderr)")
                let before = server.requests.count
                let resumed = try await HaulProcess.run(
                    [
                        "resume", "-j", "3", "--max-per-host", "3", "--retries", "0", "--timeout", "30", "-H",
                        "Authorization: Bearer again", "--json",
                    ],
                    stateHome: state
                )
                #expect(resumed.status == 0, "\(resumed.stderr)")
                #expect(resumed.stdout.contains("\"event\":\"finished\""), "JSON events")
                try self.expectEveryFileIdentical(folder)
                let requests = Array(server.requests.dropFirst(before))
                #expect(!requests.isEmpty)
                #expect(requests.allSatisfy { $0.headers["authorization"] == "Bearer again" })
            }
        }
    }

    @Test func statusListsEachBatchWithAtMostTenOfItsFilesNotCompletedAndABatchWithAllOfThem() async throws {
        var resources = ["/done.bin": FaultInjectingServer.Resource(body: Self.files[1])]
        for index in 0..<12 {
            resources["/s\(index).bin"] = FaultInjectingServer.Resource(
                body: Self.files[0],
                faults: [.stall(afterBytes: 1_000)]
            )
        }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await self.withFolder { folder in
                let state = folder.appending(path: "state")
                var configuration = TransferManager.Configuration()
                configuration.store = try TransferStore(path: state.appending(path: "haul/state.sqlite"))
                configuration.maximumConcurrentTransfers = 2
                let done = TransferRequest(url: server.url("/done.bin"), into: folder)
                let stalled = (0..<12).map { TransferRequest(url: server.url("/s\($0).bin"), into: folder) }
                try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try manager.makeBatch().add(contentsOf: [done] + stalled)
                    while manager.state(of: done.id) != .completed { try await Task.sleep(for: .milliseconds(20)) }
                }
                let status = try await HaulProcess.run(["status"], stateHome: state)
                let lines = status.stdout.split(separator: "\n").map(String.init)
                #expect(lines.count == 12, "the batch, ten of its files, and how many more: \(status.stdout)")
                #expect(lines.first?.contains("13 files: ") == true)
                #expect(lines.first?.contains("1 completed") == true)
                #expect(lines.dropFirst().prefix(10).allSatisfy { $0.contains("/s") }, "no completed file listed")
                #expect(lines.last == "  ... and 2 more not completed: haul status 1")
                let batch = try await HaulProcess.run(["status", "1"], stateHome: state)
                #expect(batch.stdout.split(separator: "\n").count == 13, "every file of one batch")
                let json = try await HaulProcess.run(["status", "--json"], stateHome: state)
                let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
                #expect((object?["items"] as? [Any])?.count == 13, "every file in JSON")
            }
        }
    }

    @Test func noStateKeepsNothingAndConflictingStateOptionsAreBadUsage() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources()) { server in
            try await self.withFolder { folder in
                let state = folder.appending(path: "state")
                let output = try await HaulProcess.run(
                    [
                        "get", server.url("/f0.bin").absoluteString, "-d", folder.appending(path: "out").path,
                        "--no-state",
                    ],
                    stateHome: state
                )
                #expect(output.status == 0)
                #expect(!FileManager.default.fileExists(atPath: state.path))
                #expect(
                    try await HaulProcess.run(["get", "http://h/a", "--no-state", "--state", "/tmp/x"]).status == 64
                )
            }
        }
    }

    @Test func resumeSaysWhenABatchWasStoppedBeforeItsListWasReadToTheEnd() async throws {
        try await FaultInjectingServer.withServer(resources: Self.resources()) { server in
            try await self.withFolder { folder in
                // A process that read part of its list and stopped: one item recorded, the batch never sealed.
                let state = folder.appending(path: "state")
                var configuration = TransferManager.Configuration()
                configuration.store = try TransferStore(path: state.appending(path: "haul/state.sqlite"))
                let request = TransferRequest(url: server.url("/f0.bin"), into: folder.appending(path: "out"))
                try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try manager.makeBatch().add(request)
                    while manager.state(of: request.id) != .completed { try await Task.sleep(for: .milliseconds(20)) }
                }
                let status = try await HaulProcess.run(["status"], stateHome: state)
                #expect(status.stdout.contains("unfinished"))
                #expect(status.stdout.contains("list not read to its end"))

                let resumed = try await HaulProcess.run(["resume"], stateHome: state)
                #expect(resumed.status == 1, "what was recorded is done, but not the whole list")
                #expect(resumed.stderr.contains("was stopped before its input list was read to the end"))
                #expect(
                    server.requests.filter { $0.path == "/f0.bin" }.count == 1,
                    "the recorded file is not fetched again"
                )
                let again = try await HaulProcess.run(["resume"], stateHome: state)
                #expect(
                    again.stderr.contains("was stopped before its input list was read to the end"),
                    "resuming does not make the list whole"
                )

                let pruned = try await HaulProcess.run(["status", "--prune"], stateHome: state)
                #expect(pruned.stdout.contains("Forgot 1 finished batch."))
                #expect(try await HaulProcess.run(["resume"], stateHome: state).stdout.contains("Nothing to resume."))
            }
        }
    }

    @Test func processesStartedTogetherOnANewStateDatabaseAllSucceed() async throws {
        try await FaultInjectingServer.withServer(resources: [
            "/a.bin": .init(body: Self.files[0]), "/b.bin": .init(body: Self.files[1]),
        ]) { server in
            try await self.withFolder { folder in
                // As a script starting several downloads at once on a new machine would: each creates the database.
                let state = folder.appending(path: "state")
                let outputs = try await withThrowingTaskGroup(of: HaulProcess.Output.self) { group in
                    for index in 0..<4 {
                        let name = index.isMultiple(of: 2) ? "/a.bin" : "/b.bin"
                        group.addTask {
                            try await HaulProcess.run(
                                [
                                    "get", server.url(name).absoluteString, "-d",
                                    folder.appending(path: "out\(index)").path,
                                ],
                                stateHome: state
                            )
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                for output in outputs { #expect(output.status == 0, "\(output.stderr)") }
                for index in 0..<4 {
                    let name = index.isMultiple(of: 2) ? "a.bin" : "b.bin"
                    let expected = Self.files[index.isMultiple(of: 2) ? 0 : 1]
                    let path = folder.appending(path: "out\(index)/\(name)").path
                    #expect(FileManager.default.contents(atPath: path) == Data(expected))
                }
            }
        }
    }
}
