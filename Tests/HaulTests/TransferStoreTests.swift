import Foundation
import GRDB
import Testing

@testable import Haul

@Suite("The store")
struct TransferStoreTests {
    func row(_ id: String, state: TransferState = .waiting) -> TransferRow {
        var row = TransferRow.waitingDownload(id: id, url: "http://h/\(id)", folder: "/tmp/x")
        row.nameComponents = "[\"\(id)\"]"
        row.headers = "[[\"X-A\",\"1\"]]"
        row.state = state.description
        return row
    }

    @Test func migratesAnEmptyDatabaseAndNamesItsMigrations() throws {
        let store = try TransferStore()
        let applied = try store.database.read { try TransferStore.migrator.appliedIdentifiers($0) }
        #expect(
            applied.sorted() == [
                "v1: batches and transfers", "v2: leases", "v3: uploads and deletions", "v4: open batches",
            ]
        )
        #expect(try store.batches().isEmpty)
    }

    @Test func recordsStateChangesValidatorsCheckpointsAndResults() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        try store.apply(
            owner: "A",
            [
                .insertItem(batchID: batch, position: 0, row: self.row("a")),
                .insertItem(batchID: batch, position: 1, row: self.row("b")),
            ]
        )
        _ = try store.database.write { try store.claim("a", owner: "A", in: $0) }
        try store.apply(
            owner: "A",
            [
                .state("a", .running, attempts: 1),
                .validator("a", etag: "\"e\"", lastModified: nil, totalSize: 100),
                .checkpoint("a", bytesOnDisk: 40),
            ]
        )
        let a = try #require(try store.transfer("a"))
        #expect(a.state == "running")
        #expect(a.bytesOnDisk == 40)
        #expect(a.totalBytes == 100)
        #expect(a.attempts == 1)
        #expect(try store.row("a")?.etag == "\"e\"")

        try store.apply(
            owner: "A",
            [
                .completed(
                    "a",
                    CompletedFile(path: URL(filePath: "/tmp/x/a"), byteCount: 100, sha256: "ff"),
                    modified: 5
                ),
                .failed("b", HaulError(.httpStatus, "The server answered 404 Not Found", httpStatus: 404), attempts: 1),
            ]
        )
        let stored = try store.transfers(inBatch: batch)
        #expect(stored.map(\.state) == ["completed", "failed"])
        #expect(stored[0].finalPath?.path == "/tmp/x/a")
        #expect(stored[1].errorCode == "httpStatus")
        #expect(stored[1].httpStatus == 404)
        #expect(try store.batches().first?.isFinished == true)
    }

    @Test func listsOnlyUnfinishedBatchesToResumeAndForgetsFinishedOnes() throws {
        let store = try TransferStore()
        let done = try store.createBatch()
        let open = try store.createBatch()
        try store.apply(
            owner: "A",
            [
                .insertItem(batchID: done, position: 0, row: self.row("a", state: .completed)),
                .insertItem(batchID: open, position: 0, row: self.row("b", state: .paused)),
            ]
        )
        #expect(try store.unfinishedBatches().map(\.id) == [open])
        #expect(try store.forgetFinishedBatches() == 1)
        #expect(try store.batches().map(\.id) == [open])
        #expect(try store.transfer("a") == nil, "a transfer no batch refers to is forgotten too")
    }

    @Test func aSecondSubmissionKeepsWhatTheFirstLearned() throws {
        let store = try TransferStore()
        let first = try store.createBatch()
        try store.apply(owner: "A", [.insertItem(batchID: first, position: 0, row: self.row("a"))])
        _ = try store.database.write { try store.claim("a", owner: "A", in: $0) }
        try store.apply(
            owner: "A",
            [
                .validator("a", etag: "\"e\"", lastModified: nil, totalSize: 100),
                .checkpoint("a", bytesOnDisk: 40),
            ]
        )
        let second = try store.createBatch()
        try store.apply(owner: "A", [.insertItem(batchID: second, position: 0, row: self.row("a"))])
        #expect(try store.row("a")?.etag == "\"e\"")
        #expect(try store.transfer("a")?.bytesOnDisk == 40)
        #expect(try store.transfers(inBatch: second).map(\.id) == ["a"])
    }

    @Test func rebuildsTheRequestFromARow() throws {
        let request = try #require(self.row("a").request)
        #expect(request.url.absoluteString == "http://h/a")
        #expect(request.id == "a")
        #expect(request.headers.map(\.name) == ["X-A"])
        #expect(request.destination == .folder(URL(filePath: "/tmp/x", directoryHint: .isDirectory)))
    }

    @Test func aLeaseKeepsASecondOwnerOutUntilItIsReleasedOrExpires() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let insert = StoreOperation.insertItem(batchID: batch, position: 0, row: self.row("a"))
        try store.apply(owner: "A", [insert])
        guard case .claimed = try store.database.write({ try store.claim("a", owner: "A", in: $0) }) else {
            Issue.record("A claims"); return
        }
        guard case .heldElsewhere = try store.database.write({ try store.claim("a", owner: "B", in: $0) }) else {
            Issue.record("B waits"); return
        }
        guard case .claimed = try store.database.write({ try store.claim("a", owner: "A", in: $0) }) else {
            Issue.record("A again"); return
        }

        try store.apply(owner: "B", [.state("a", .failed, attempts: 9)])
        #expect(try store.transfer("a")?.state == "waiting", "only the lease holder writes the row")

        try store.apply(owner: "A", [.state("a", .paused, attempts: 1)])
        guard case .claimed = try store.database.write({ try store.claim("a", owner: "B", in: $0) }) else {
            Issue.record("released"); return
        }

        try store.database.write { try $0.execute(sql: "UPDATE transfer SET leaseExpires = 0") }
        guard case .claimed = try store.database.write({ try store.claim("a", owner: "C", in: $0) }) else {
            Issue.record("expired"); return
        }
    }

    @Test func aLeaseOfAProcessThatIsGoneIsFreeAtOnce() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        // A pid that cannot be running: above the kernel's maximum.
        let dead = "\(LeaseOwner.hostName())/2147483000/x"
        try store.apply(owner: dead, [.insertItem(batchID: batch, position: 0, row: self.row("a"))])
        guard case .claimed = try store.database.write({ try store.claim("a", owner: dead, in: $0) }) else {
            Issue.record("the first claim")
            return
        }
        let current = LeaseOwner.current()
        guard case .claimed = try store.database.write({ try store.claim("a", owner: current, in: $0) }) else {
            Issue.record("a dead holder's lease is taken over")
            return
        }
        guard case .heldElsewhere = try store.database.write({ try store.claim("a", owner: "elsewhere/1/y", in: $0) })
        else {
            Issue.record("a live (or remote) holder's lease is respected")
            return
        }
    }

    @Test func recognisesAFileRenamedIntoPlaceByAProcessKilledBeforeItRecordedTheCompletion() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try TransferStore()
        let request = TransferRequest(url: URL(string: "http://h/file.bin")!, into: folder)
        var row = self.row(request.id.rawValue)
        row.url = request.url.absoluteString
        row.destinationPath = folder.standardizedFileURL.path
        row.folder = folder.path
        row.nameComponents = "[\"file.bin\"]"
        let final = folder.appending(path: "file.bin")
        try store.apply(
            owner: "A",
            [
                .insertItem(batchID: try store.createBatch(), position: 0, row: row),
                .publishing(request.id, finalPath: final.path, size: 5),
            ]
        )
        #expect(Persisted.lookUp(request, in: store)?.completedFile == nil, "no file there yet: not complete")

        try Data("hello".utf8).write(to: final)
        let found = try #require(Persisted.lookUp(request, in: store)?.completedFile)
        #expect(found.path.path == final.path)
        #expect(found.byteCount == 5)

        try Data("hello!".utf8).write(to: final)
        #expect(Persisted.lookUp(request, in: store)?.completedFile == nil, "another size: not ours")
    }

    @Test(arguments: [
        [String](), [""], ["plain.bin"], ["say \"hi\"", "back\\slash", "a/b"],
        ["line\nbreak\r\ttab", "nul\u{0}\u{1f}"],
        ["naïve café", "日本語", "emoji 🎉", "\u{7f}"],
    ])
    func writesJSONThatDecodesToTheSameStrings(strings: [String]) throws {
        let text = JSONText.array(strings)
        #expect(try JSONDecoder().decode([String].self, from: Data(text.utf8)) == strings)
        let nested = JSONText.array([JSONText.array(strings), JSONText.array(["x"])], elementsAreJSON: true)
        #expect(try JSONDecoder().decode([[String]].self, from: Data(nested.utf8)) == [strings, ["x"]])
    }

    @Test func aDownloadsOperationIsWhatTheEncoderWouldWrite() throws {
        let decoded = try JSONDecoder().decode(StoredOperation.self, from: Data(StoredOperation.downloadJSON.utf8))
        #expect(decoded == StoredOperation(.download))
    }

    @Test func bindsNullsTextIntegersDoublesAndBooleansAsGRDBWould() throws {
        let store = try TransferStore()
        let row = try store.database.write { db in
            try db.execute(sql: "CREATE TEMP TABLE t (a, b, c, d, e, f, g)")
            try db.run("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)") { bind in
                bind.bind(nil as String?)
                bind.bind("")
                bind.bind("naïve café 🎉 \u{0}nul")
                bind.bind(Int64.max)
                bind.bind(-3)
                bind.bind(0.25)
                bind.bind(true)
            }
            return try #require(try Row.fetchOne(db, sql: "SELECT *, hex(c) AS cHex FROM t"))
        }
        #expect(row["a"] as DatabaseValue == .null)
        #expect(row["b"] as DatabaseValue == "".databaseValue, "an empty string is text, not null")
        // GRDB reads text as a C string; the bytes in the database are all there, past the NUL.
        let text = "naïve café 🎉 \u{0}nul"
        #expect(row["cHex"] as String == text.utf8.map { String(format: "%02X", $0) }.joined())
        #expect(row["d"] as Int64 == .max)
        #expect(row["e"] as Int == -3)
        #expect(row["f"] as Double == 0.25)
        #expect(row["g"] as Int == 1)
    }

    @Test func aStatementBoundWithTooFewOrTooManyValuesFailsAndWritesNothing() throws {
        let store = try TransferStore()
        let sql = "INSERT INTO batch (createdAt, listComplete) VALUES (?, ?)"
        try store.database.write { db in
            #expect(throws: DatabaseError.self) { try db.run(sql) { $0.bind(1.0) } }
            #expect(throws: DatabaseError.self) {
                try db.run(sql) { bind in
                    bind.bind(1.0)
                    bind.bind(true)
                    bind.bind(3)
                }
            }
        }
        #expect(try store.database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM batch") } == 0)
    }

    @Test func aStatementSQLiteRefusesThrowsSQLitesErrorAndRunsAgainAfterward() throws {
        let store = try TransferStore()
        let sql = "INSERT INTO batch (id, createdAt) VALUES (?, ?)"
        try store.database.write { db in
            try db.run(sql) { bind in
                bind.bind(7)
                bind.bind(1.5)
            }
            let error = #expect(throws: DatabaseError.self) {
                try db.run(sql) { bind in
                    bind.bind(7)
                    bind.bind(2.5)
                }
            }
            #expect(error?.resultCode == .SQLITE_CONSTRAINT)
            #expect(error?.sql == sql)
            try db.run(sql) { bind in
                bind.bind(8)
                bind.bind(2.5)
            }
        }
        let rows = try store.database.read { try Row.fetchAll($0, sql: "SELECT id, createdAt FROM batch ORDER BY id") }
        #expect(rows.map { $0["id"] as Int } == [7, 8])
        #expect(rows.map { $0["createdAt"] as Double } == [1.5, 2.5])
    }

    @Test func publishingRecordsThatArriveWithinTheWaitShareATransactionAndAreWrittenWhenTheirWaitEnds() async throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let writer = StoreWriter(store: store, publishingLinger: .milliseconds(300))
        let ids = (0..<16).map { "f\($0)" }
        for (position, id) in ids.enumerated() {
            writer.enqueue(.insertItem(batchID: batch, position: position, row: self.row(id)))
        }
        writer.flush()
        let before = writer.transactionCount
        let written = await withTaskGroup(of: String?.self, returning: [String?].self) { group in
            // One every 5 ms, as files finishing one after another: each would find the writer idle and take a
            // transaction of its own without the wait (300 ms, longer than the 80 ms they take to arrive).
            for (index, id) in ids.enumerated() {
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(5 * index))
                    await writer.flushAndWait(adding: .publishing(TransferID(id), finalPath: "/tmp/x/\(id)", size: 5))
                    return try? store.row(TransferID(id))?.finalPath
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(written) == Set(ids.map { "/tmp/x/\($0)" }), "each record is in the database when its wait ends")
        #expect(writer.transactionCount - before <= 2, "sixteen records, one transaction (two if one came late)")
        #expect(writer.lastError == nil)
    }

    @Test func aPublishingRecordWithNoOneToWaitForIsWrittenWithoutTheWait() async throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let writer = StoreWriter(store: store, publishingLinger: .seconds(60))
        writer.enqueue(.insertItem(batchID: batch, position: 0, row: self.row("last")))
        let started = ContinuousClock.now
        await writer.flushAndWait(adding: .publishing("last", finalPath: "/tmp/x/last", size: 5), lingering: false)
        #expect(ContinuousClock.now - started < .seconds(30), "not the writer's minute")
        #expect(try store.row("last")?.finalPath == "/tmp/x/last")
    }
}
