import Foundation
import GRDB
import HaulTesting
import Testing

@testable import Haul

@Suite("The store's slices")
struct SliceTests {
    func row(_ id: String) -> TransferRow {
        var row = TransferRow.waitingDownload(id: id, url: "http://h/\(id)", folder: "/tmp/x")
        row.nameComponents = "[\"\(id)\"]"
        row.headers = "[[\"X-A\",\"1\"]]"
        return row
    }

    func ids(_ range: Range<Int>, prefix: String = "s") -> [String] {
        range.map { String(format: "\(prefix)%02d", $0) }
    }

    /// Inserts `ids` into `batch` as a manager's writer does (a run of inserts in bulk), as `owner`.
    @discardableResult
    func insert(
        _ ids: [String],
        into batch: BatchID,
        at first: Int = 0,
        of store: TransferStore,
        owner: String = "A"
    ) throws -> [TransferID] {
        try store.database.write { db in
            var statements = StoreStatements(ownSliceEntries: store.ownSliceEntries)
            return try StoreOperation.applyInserts(
                ids.enumerated().map { .insertItem(batchID: batch, position: first + $0, row: self.row($1)) }[...],
                db,
                owner: owner,
                statements: &statements
            )
        }
    }

    func count(_ table: String, in store: TransferStore) throws -> Int {
        try store.database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM \(table)") ?? -1 }
    }

    /// A server of `bodies` at `/NAME0.bin`, `/NAME1.bin`, ..., each sent 2,000 bytes at a time `chunkDelay` apart,
    /// and a new folder, removed after `body`.
    func withPacedFiles(
        _ bodies: [[UInt8]],
        named name: String,
        chunkDelay: Duration,
        _ body: (FaultInjectingServer, URL) async throws -> Void
    ) async throws {
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for (index, bytes) in bodies.enumerated() {
            resources["/\(name)\(index).bin"] = .init(body: bytes, chunkSize: 2_000, chunkDelay: chunkDelay)
        }
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-slices-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try await FaultInjectingServer.withServer(resources: resources) { server in try await body(server, folder) }
    }

    func publishing(_ id: String) -> StoreOperation {
        .publishing(TransferID(id), finalPath: "/tmp/x/\(id)", size: 5, sha256: "ab", modified: 1.5)
    }

    @Test func aBatchsRunOfThirtyTwoRequestsIsOneSliceThatReadsBackAsTheRowsItsInsertWouldHaveWritten() throws {
        let (sliced, single) = (try TransferStore(), try TransferStore())
        let batch = try sliced.createBatch()
        #expect(try single.createBatch() == batch)
        let ids = self.ids(0..<40)
        let leased = try self.insert(ids, into: batch, of: sliced)
        try single.apply(
            owner: "A",
            ids.enumerated().map { .insertItem(batchID: batch, position: $0, row: self.row($1)) }
        )

        #expect(try self.count("slice", in: sliced) == 1)
        #expect(try self.count("sliceEntry", in: sliced) == 32)
        #expect(try self.count("transfer", in: sliced) == 8, "the rest of the run, as rows")
        #expect(try self.count("batchEntry", in: sliced) == 8)
        #expect(leased.map(\.rawValue) == ids, "each request leased to its inserter")

        var (written, expected) = (try sliced.rows(inBatch: batch), try single.rows(inBatch: batch))
        #expect(written.map(\.id) == ids, "in the batch's order")
        for index in written.indices {
            #expect(abs(written[index].updatedAt - expected[index].updatedAt) < 60)
            #expect(abs((written[index].leaseExpires ?? 0) - (expected[index].leaseExpires ?? 0)) < 60)
            (written[index].updatedAt, written[index].leaseExpires) = (0, nil)
            (expected[index].updatedAt, expected[index].leaseExpires) = (0, nil)
        }
        #expect(written == expected)
        #expect(try sliced.rows(ids.map { TransferID($0) }).map { $0?.id } == ids)
        #expect(try sliced.transfer("s05")?.state == "waiting")
        #expect(try sliced.batches().map(\.transferCounts) == [["waiting": 40]])
        let digests = try sliced.transferIDDigests()
        #expect(ids.allSatisfy { digests.mayContain(TransferID($0)) })
        #expect(try sliced.rowsAtMost() >= 40)
    }

    @Test func aSlicedRequestsCompletionGoesToItsSliceAndReadsBackAsTheCompletedRow() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let ids = self.ids(0..<32)
        try self.insert(ids, into: batch, of: store)
        try store.apply(owner: "A", [self.publishing("s03"), self.publishing("s07")])

        #expect(try self.count("sliceResult", in: store) == 1, "one row for the transaction's completions in a slice")
        #expect(try self.count("transfer", in: store) == 0, "no row of its own")
        let row = try #require(try store.row("s07"))
        #expect(row.state == "completed")
        #expect(row.finalPath == "/tmp/x/s07")
        #expect((row.bytesOnDisk, row.totalSize, row.finalSize) == (5, 5, 5))
        #expect(row.finalModified == 1.5)
        #expect(row.sha256 == "ab")
        #expect(row.leaseOwner == "A", "the lease is kept until the rename is done")
        #expect((row.leaseExpires ?? 0) > Date().timeIntervalSince1970 + 30)
        #expect(try store.row("s04")?.state == "waiting")
        #expect(try store.batches().map(\.transferCounts) == [["waiting": 30, "completed": 2]])
        #expect(try store.rows(inBatch: batch).filter { $0.state == "completed" }.map(\.id) == ["s03", "s07"])
    }

    @Test func anythingButItsCompletionWritesASlicedRequestOutAsARowFirst() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        try self.insert(self.ids(0..<32), into: batch, of: store)
        try store.apply(owner: "A", [.state("s01", .paused, attempts: 2), .checkpoint("s02", bytesOnDisk: 7)])
        try store.apply(owner: "A", [self.publishing("s04")])
        let completedAt = try #require(try store.row("s04")?.updatedAt)
        try store.apply(owner: "A", [.reopen("s04", completedAt: completedAt, staleHolder: "A")])

        #expect(try self.count("transfer", in: store) == 3)
        #expect(try store.row("s01")?.state == "paused")
        #expect(try store.row("s01")?.attempts == 2)
        #expect(try store.row("s02")?.bytesOnDisk == 7)
        let reopened = try #require(try store.row("s04"))
        #expect(reopened.state == "waiting", "reopened from the completed row its slice stood for")
        #expect(reopened.finalPath == "/tmp/x/s04")
        // A completion now goes to the row.
        try store.apply(owner: "A", [self.publishing("s01")])
        #expect(try store.row("s01")?.state == "completed")
        #expect(try self.count("sliceResult", in: store) == 1)
        // Each counted once, as its row says where it has one.
        let batches = try store.batches()
        #expect(batches.map(\.transferCounts) == [["completed": 1, "waiting": 31]])
        // s01's file, s02's checkpoint, s04's file until it is fetched again.
        let bytes: Int64 = 5 + 7 + 5
        #expect(batches.first?.bytesOnDisk == bytes)
    }

    @Test func anotherProcessAddingSlicedRequestsWhileTheirLeaseLastsListsThemAndLeavesThemInTheSlice() throws {
        // Two processes' stores on one file: A's knows where it sliced its requests, B's does not.
        let path = FileManager.default.temporaryDirectory.appending(path: "haul-slices-\(UUID().uuidString).sqlite")
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path.path + suffix) }
        }
        let (store, other) = (try TransferStore(path: path), try TransferStore(path: path))
        let (first, second) = (try store.createBatch(), try store.createBatch())
        let ids = self.ids(0..<32)
        try self.insert(ids, into: first, of: store, owner: "A")
        let leasedByB = try self.insert(ids, into: second, of: other, owner: "B")
        #expect(leasedByB.isEmpty, "none of A's leases taken")
        #expect(try self.count("slice", in: store) == 1, "no second slice of the same requests")
        #expect(try self.count("transfer", in: store) == 0, "nothing written out: the inserts would change nothing")
        #expect(try other.rows(inBatch: second).map(\.id) == ids, "each listed in B's batch")
        #expect(try other.row("s09")?.leaseOwner == "A")
        guard case .heldElsewhere = try other.database.write({ try other.claim("s09", owner: "B", in: $0) }) else {
            Issue.record("A holds it")
            return
        }
        // B waits to try again: its change of the transfer's state changes nothing, and writes no row out.
        try other.apply(owner: "B", [.state("s09", .waitingToRetry, attempts: 1)])
        #expect(try self.count("transfer", in: store) == 0)

        try store.apply(owner: "A", [self.publishing("s09")])
        #expect(try other.row("s09")?.state == "completed", "A's completion, seen by B")
        #expect(
            try other.batches().map(\.transferCounts) == [
                ["waiting": 31, "completed": 1], ["waiting": 31, "completed": 1],
            ]
        )
    }

    @Test func aCompletionAfterTheSlicesLeaseEndedGoesToTheRowATakeoverWrote() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        try self.insert(self.ids(0..<32), into: batch, of: store, owner: "A")
        // The slice's lease ends before A's completion comes: B takes s03 over, and its row is then the one to change.
        try store.database.write { try $0.execute(sql: "UPDATE slice SET leaseExpires = 0") }
        store.ownSliceEntries.withLockedValue { entries in
            for (id, entry) in entries {
                entries[id] = OwnSliceEntry(
                    slice: entry.slice,
                    entry: entry.entry,
                    owner: entry.owner,
                    insertedAt: -TransferStore.insertLeaseDuration,
                    inserted: entry.inserted
                )
            }
        }
        guard case .claimed = try store.database.write({ try store.claim("s03", owner: "B", in: $0) }) else {
            Issue.record("expired")
            return
        }
        try store.apply(owner: "A", [self.publishing("s03"), self.publishing("s04")])
        #expect(try store.row("s03")?.state == "waiting", "B's: A's completion is refused, as a row's is")
        #expect(try store.row("s03")?.leaseOwner == "B")
        #expect(try store.row("s04")?.state == "completed", "no one took it: A's completion, in the slice")
        #expect(try self.count("transfer", in: store) == 1)
    }

    @Test func aClaimTakesASlicedRequestsLeaseOnlyWhenItIsFreeAndThenWritesItsRow() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        try self.insert(self.ids(0..<32), into: batch, of: store, owner: "A")
        guard case .heldElsewhere = try store.database.write({ try store.claim("s00", owner: "B", in: $0) }) else {
            Issue.record("A holds it")
            return
        }
        #expect(try self.count("transfer", in: store) == 0, "held elsewhere, it stays in its slice")
        guard case .claimed = try store.database.write({ try store.claim("s00", owner: "A", in: $0) }) else {
            Issue.record("A's own")
            return
        }
        try store.database.write { try $0.execute(sql: "UPDATE slice SET leaseExpires = 0") }
        guard case .claimed = try store.database.write({ try store.claim("s01", owner: "B", in: $0) }) else {
            Issue.record("expired")
            return
        }
        #expect(try store.row("s01")?.leaseOwner == "B")
        #expect(try store.row("s02")?.leaseOwner == "A", "the others stay in the slice")
        #expect(try self.count("transfer", in: store) == 1, "A's own claim, under its slice's lease, wrote nothing")
    }

    @Test func aResumedBatchListsEachOfItsSlicedRequestsOnce() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let ids = self.ids(0..<32)
        try self.insert(ids, into: batch, of: store, owner: "A")
        // Resumed by a later process: the same requests at the same places of the same batch, now as rows.
        try self.insert(ids, into: batch, of: store, owner: "C")
        #expect(try store.rows(inBatch: batch).map(\.id) == ids)
        #expect(try store.batches().map(\.transferCount) == [32])
    }

    @Test func forgettingAFinishedBatchRemovesItsSlicesAndKeepsWhatAnotherBatchJoined() throws {
        let store = try TransferStore()
        let (first, second) = (try store.createBatch(), try store.createBatch())
        let ids = self.ids(0..<32)
        try self.insert(ids, into: first, of: store)
        try store.apply(owner: "A", ids.map(self.publishing))
        // A completed transfer submitted again joins a later batch, which has one more to do.
        try store.apply(
            owner: "A",
            [
                .joinBatch(batchID: second, position: 0, "s05"),
                .insertItem(batchID: second, position: 1, row: self.row("t00")),
            ]
        )
        #expect(try store.rows(inBatch: second).map(\.id) == ["s05", "t00"])
        #expect(try store.rows(inBatch: second).first?.state == "completed")
        #expect(try store.batches().map(\.transferCounts) == [["completed": 32], ["completed": 1, "waiting": 1]])

        #expect(try store.forgetFinishedBatches() == 1)
        for table in ["slice", "sliceEntry", "sliceResult"] {
            #expect(try self.count(table, in: store) == 0, "\(table) emptied")
        }
        #expect(try store.rows(inBatch: second).map(\.id) == ["s05", "t00"])
        #expect(try store.row("s05")?.finalPath == "/tmp/x/s05")
        #expect(try store.row("s06") == nil)
        #expect(try self.count("transfer", in: store) == 2)
    }

    @Test func aRunThatSpansTwoBatchesOrHasARequestTheStoreHoldsIsInsertedAsRows() throws {
        let store = try TransferStore()
        let (first, second) = (try store.createBatch(), try store.createBatch())
        let operations = self.ids(0..<32).enumerated().map { index, id in
            StoreOperation.insertItem(batchID: index == 31 ? second : first, position: index, row: self.row(id))
        }
        try store.database.write { db in
            var statements = StoreStatements(ownSliceEntries: store.ownSliceEntries)
            _ = try StoreOperation.applyInserts(operations[...], db, owner: "A", statements: &statements)
        }
        #expect(try self.count("slice", in: store) == 0)
        try store.apply(owner: "A", [.insertItem(batchID: first, position: 0, row: self.row("u05"))])
        try self.insert(self.ids(0..<32, prefix: "u"), into: first, at: 40, of: store)
        #expect(try self.count("slice", in: store) == 0, "u05 is a row already")
        try self.insert(self.ids(32..<64, prefix: "u"), into: first, at: 80, of: store)
        #expect(try self.count("slice", in: store) == 1)
    }

    @Test func aSliceThatDoesNotUnpackIsAnErrorNotRows() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        try self.insert(self.ids(0..<32), into: batch, of: store)
        try store.database.write { try $0.execute(sql: "UPDATE slice SET entries = x'0102'") }
        #expect(throws: DatabaseError.self) { try store.row("s01") }
        #expect(throws: DatabaseError.self) { try store.rows(inBatch: batch) }
    }

    @Test(.timeLimit(.minutes(1)), arguments: [false, true])
    func aStoppedManagersSlicedBatchIsFinishedByTheNextWithoutFetchingACompletedFileAgain(resuming: Bool) async throws {
        let bodies = (0..<40).map { FaultInjectingServer.body(size: 10_000 + $0, seed: UInt64(700 + $0)) }
        try await self.withPacedFiles(bodies, named: "g", chunkDelay: .milliseconds(10)) { server, folder in
            let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
            var configuration = TransferManager.Configuration()
            configuration.store = store
            configuration.maximumConcurrentTransfers = 4
            let requests = bodies.indices.map {
                TransferRequest(url: server.url("/g\($0).bin"), into: folder.appending(path: "out"))
            }
            let completed = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                let batch = try manager.makeBatch()
                let events = batch.events
                try batch.add(contentsOf: requests)
                batch.seal()
                var completed: Set<String> = []
                for await event in events {
                    if case .transfer(let transfer) = event, case .finished(.completed) = transfer.kind {
                        completed.insert(transfer.url.path)
                        if completed.count >= 12 { break }
                    }
                }
                return completed
            }
            #expect(try self.count("slice", in: store) >= 1, "the batch was sliced")
            #expect(try self.count("sliceResult", in: store) >= 1, "completions recorded in slices")
            let before = server.requests.count

            // The next manager, on a store opened anew (as the next process would), with the same requests.
            configuration.store = try TransferStore(path: folder.appending(path: "state.sqlite"))
            let report = try await TransferManager.withTransferManager(configuration: configuration) { manager in
                // The same batch resumed (`haul resume`), or the same requests as a batch of their own (`haul get`).
                try await (resuming ? manager.resumeStoredBatch(BatchID(1)) : manager.enqueue(requests)).report()
            }
            #expect(report.completed.count == 40, "\(report.items.map(\.result))")
            let askedAgain = server.requests.dropFirst(before).map(\.path).filter(completed.contains)
            #expect(askedAgain.isEmpty, "a completed file is never fetched again: \(askedAgain)")
            for (index, body) in bodies.enumerated() {
                #expect(try Data(contentsOf: folder.appending(path: "out/g\(index).bin")) == Data(body))
            }
            let batches = try configuration.store!.batches()
            #expect(batches.map(\.transferCounts) == Array(repeating: ["completed": 40], count: resuming ? 1 : 2))
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aSecondManagerAddingABatchTheFirstSlicedAndRunsFetchesNoFileTwice() async throws {
        let bodies = (0..<64).map { FaultInjectingServer.body(size: 8_000 + $0, seed: UInt64(900 + $0)) }
        // A fifth of a second each: most are still queued when the first periodic flush writes them, in bulk.
        try await self.withPacedFiles(bodies, named: "h", chunkDelay: .milliseconds(50)) { server, folder in
            let requests = bodies.indices.map {
                TransferRequest(url: server.url("/h\($0).bin"), into: folder.appending(path: "out"))
            }
            // As two processes would: each manager with a store of its own on the one file.
            @Sendable func run() async throws -> BatchReport {
                var configuration = TransferManager.Configuration()
                configuration.store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                configuration.maximumConcurrentTransfers = 8
                // The second to ask for a file waits, trying again, until the first has it.
                configuration.retryPolicy.maximumAttempts = 100
                configuration.retryPolicy.baseDelay = .milliseconds(100)
                configuration.retryPolicy.maximumDelay = .milliseconds(200)
                return try await TransferManager.withTransferManager(configuration: configuration) { manager in
                    try await manager.enqueue(requests).report()
                }
            }
            // The second starts once the first has sliced the batch, and meets its slice.
            async let first = run()
            let probe = try TransferStore(path: folder.appending(path: "state.sqlite"))
            let started = ContinuousClock.now
            while try self.count("slice", in: probe) == 0, ContinuousClock.now - started < .seconds(10) {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(try self.count("slice", in: probe) >= 1, "the first manager sliced the batch")
            async let second = run()
            let reports = try await [first, second]
            #expect(reports.map(\.completed.count) == [64, 64], "\(reports.map { $0.items.map(\.result) })")
            let counts = Dictionary(grouping: server.requests.map(\.path), by: { $0 }).mapValues(\.count)
            #expect(counts.count == 64)
            #expect(counts.values.allSatisfy { $0 == 1 }, "each file fetched once: \(counts.filter { $0.value > 1 })")
            for (index, body) in bodies.enumerated() {
                #expect(try Data(contentsOf: folder.appending(path: "out/h\(index).bin")) == Data(body))
            }
        }
    }

    @Test func packedValuesReadBackAsWritten() throws {
        var values = PackedValues()
        values.append(Int64(-3))
        values.append(nil as Int64?)
        values.append(Int64(1) << 40 as Int64?)
        values.append("naïve 日本 🎉")
        values.append(nil as String?)
        values.append("" as String?)
        values.append(2.5 as Double?)
        try values.bytes.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) throws in
            var reader = PackedReader(bytes)
            #expect(try reader.integer() == -3)
            #expect(try reader.optionalInteger() == nil)
            #expect(try reader.optionalInteger() == 1 << 40)
            #expect(try reader.text() == "naïve 日本 🎉")
            #expect(try reader.optionalText() == nil)
            #expect(try reader.optionalText() == "")
            #expect(try reader.optionalDouble() == 2.5)
            #expect(reader.isAtEnd)
            #expect(throws: DatabaseError.self) { try reader.integer() }
        }
    }
}
