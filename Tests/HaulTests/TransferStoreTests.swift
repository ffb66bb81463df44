import Foundation
import GRDB
import NIOConcurrencyHelpers
import NIOPosix
import Testing

@testable import Haul

extension StoreWriter {
    /// ``flush(adding:lingering:then:)``, suspending until the record is written.
    func flushAndWait(adding last: StoreOperation, lingering: Bool = true) async {
        await withCheckedContinuation { continuation in
            self.flush(adding: last, lingering: lingering) { continuation.resume() }
        }
    }
}

@Suite("The store")
struct TransferStoreTests {
    func row(_ id: String, state: TransferState = .waiting) -> TransferRow {
        var row = TransferRow.waitingDownload(id: id, url: "http://h/\(id)", folder: "/tmp/x")
        row.nameComponents = "[\"\(id)\"]"
        row.headers = "[[\"X-A\",\"1\"]]"
        row.state = state.description
        return row
    }

    /// A store holding rows for `ids`, and a writer on it whose publishing records wait a minute for others: a test
    /// sees the wait rather than its end.
    func lingeringWriter(rows ids: [String]) throws -> (TransferStore, StoreWriter) {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let writer = StoreWriter(store: store, publishingLinger: .seconds(60))
        for (position, id) in ids.enumerated() {
            writer.enqueue(.insertItem(batchID: batch, position: position, row: self.row(id)))
        }
        writer.flush()
        return (store, writer)
    }

    /// The record of `id`'s completion, published at /tmp/x/`id`.
    func publishing(_ id: String) -> StoreOperation {
        .publishing(TransferID(id), finalPath: "/tmp/x/\(id)", size: 5, sha256: nil, modified: 1)
    }

    /// Waits until `condition` holds, for at most 10 s.
    func waitUntil(_ condition: () -> Bool) async throws {
        let started = ContinuousClock.now
        while !condition(), ContinuousClock.now - started < .seconds(10) {
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    @Test func migratesAnEmptyDatabaseAndNamesItsMigrations() throws {
        let store = try TransferStore()
        let applied = try store.database.read { try TransferStore.migrator.appliedIdentifiers($0) }
        #expect(
            applied.sorted() == [
                "v1: batches and transfers", "v2: leases", "v3: uploads and deletions", "v4: open batches",
                "v5: batch entries", "v6: slices", "v7: one row per transfer",
            ]
        )
        #expect(try store.batches().isEmpty)
    }

    @Test func aStoreWhoseFolderCannotBeMadeSaysWhyInWords() throws {
        let file = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        try Data("a file, not a folder".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let error = #expect(throws: HaulError.self) {
            try TransferStore(path: file.appending(path: "state/state.sqlite"))
        }
        #expect(error?.code == .fileSystem)
        #expect(error?.message == "Cannot create the folder \(file.path)/state: Not a directory", "\(error!)")
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
        LeaseOwner.register(current)
        defer { LeaseOwner.unregister(current) }
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

    /// A folder with a transfer's row in the store, as a manager would have inserted it, and its partial file.
    func publishingFixture(
        _ store: TransferStore,
        owner: String = "A"
    ) throws -> (TransferRequest, folder: URL, part: URL, final: URL) {
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let request = TransferRequest(url: URL(string: "http://h/file.bin")!, into: folder)
        var row = self.row(request.id.rawValue)
        row.url = request.url.absoluteString
        row.destinationPath = folder.standardizedFileURL.path
        row.folder = folder.path
        row.nameComponents = "[\"file.bin\"]"
        try store.apply(owner: owner, [.insertItem(batchID: try store.createBatch(), position: 0, row: row)])
        let part = URL(
            filePath: Download.partPath(id: request.id, folderPath: folder.path, nameComponents: ["file.bin"])
        )
        try Data("hello".utf8).write(to: part)
        return (request, folder, part, folder.appending(path: "file.bin"))
    }

    @Test func aCompletionRecordedBeforeTheRenameIsFoundOnceTheFileIsInPlaceWithItsSizeAndTime() throws {
        let store = try TransferStore()
        let (request, folder, part, final) = try self.publishingFixture(store)
        defer { try? FileManager.default.removeItem(at: folder) }
        let modified = try #require(Persisted.sizeAndModification(part.path)?.1)
        try store.apply(
            owner: "A",
            [.publishing(request.id, finalPath: final.path, size: 5, sha256: "ab", modified: modified)]
        )
        #expect(
            Persisted.lookUp([request], in: store)[0]?.completedFile == nil,
            "killed before the rename: not complete"
        )

        try FileManager.default.moveItem(at: part, to: final)
        let found = try #require(Persisted.lookUp([request], in: store)[0]?.completedFile)
        #expect(found.path.path == final.path)
        #expect(found.byteCount == 5)
        #expect(found.sha256 == "ab")

        try Data("hullo".utf8).write(to: final)
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSince1970: 1)],
            ofItemAtPath: final.path
        )
        #expect(Persisted.lookUp([request], in: store)[0]?.completedFile == nil, "same size, another time: not ours")
    }

    @Test func aCompletionRecordedBeforeTheRenameKeepsTheLeaseSoThatAnotherProcessWaitsForTheFile() throws {
        let store = try TransferStore()
        let me = LeaseOwner.current()
        LeaseOwner.register(me)
        defer { LeaseOwner.unregister(me) }
        let (request, folder, part, final) = try self.publishingFixture(store, owner: me)
        defer { try? FileManager.default.removeItem(at: folder) }
        let modified = try #require(Persisted.sizeAndModification(part.path)?.1)
        try store.apply(
            owner: me,
            [.publishing(request.id, finalPath: final.path, size: 5, sha256: nil, modified: modified)]
        )
        #expect(try store.row(request.id)?.leaseOwner == me)
        guard case .heldElsewhere = try store.database.write({ try store.claim(request.id, owner: "B", in: $0) })
        else {
            Issue.record("before the rename, another process must not download the same file")
            return
        }
        try FileManager.default.moveItem(at: part, to: final)
        guard
            case .completedElsewhere(let file) = try store.database.write({
                try store.claim(request.id, owner: "B", in: $0)
            })
        else {
            Issue.record("after the rename, another process finds the file complete")
            return
        }
        #expect(file.path.path == final.path)

        // Once its manager has ended, the lease is free at once: the file deleted, the next manager downloads it.
        LeaseOwner.unregister(me)
        try FileManager.default.removeItem(at: final)
        guard case .claimed = try store.database.write({ try store.claim(request.id, owner: "C", in: $0) }) else {
            Issue.record("an ended manager's lease is free")
            return
        }
    }

    @Test func recognisesAFileRenamedIntoPlaceUnderAnEarlierVersionsPublishingRecord() throws {
        // Earlier versions recorded only the path and size before the rename, and the completion after it.
        let store = try TransferStore()
        let (request, folder, part, final) = try self.publishingFixture(store)
        defer { try? FileManager.default.removeItem(at: folder) }
        try store.database.write { db in
            try db.execute(
                sql: "UPDATE transfer SET finalPath = ?, finalSize = 5 WHERE id = ?",
                arguments: [final.path, request.id.rawValue]
            )
        }
        #expect(Persisted.lookUp([request], in: store)[0]?.completedFile == nil, "the partial file is still there")

        try FileManager.default.moveItem(at: part, to: final)
        let found = try #require(Persisted.lookUp([request], in: store)[0]?.completedFile)
        #expect(found.path.path == final.path)
        #expect(found.byteCount == 5)

        try Data("hello!".utf8).write(to: final)
        #expect(Persisted.lookUp([request], in: store)[0]?.completedFile == nil, "another size: not ours")
    }

    @Test func closingLeavesTheWriteAheadLogForTheNextOpenerToRead() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appending(path: "state.sqlite")
        do {
            let store = try TransferStore(path: path)
            try store.apply(
                owner: "A",
                [.insertItem(batchID: try store.createBatch(), position: 0, row: self.row("a"))]
            )
        }
        #expect(FileManager.default.fileExists(atPath: path.path + "-wal"), "not copied into the database and removed")
        #expect(try TransferStore(path: path).transfer("a")?.state == "waiting")
    }

    @Test func storesOpenedAtOnceOnANewPathAllOpenOnOneSchema() async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appending(path: "state.sqlite")
        // As several processes started together on a new store would: each creates it and runs the migrations.
        let opened = await withTaskGroup(of: Result<TransferStore, any Error>.self) { group in
            for _ in 0..<6 { group.addTask { Result { try TransferStore(path: path) } } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let stores = try opened.map { try $0.get() }
        for (index, store) in stores.enumerated() {
            try store.apply(
                owner: "owner \(index)",
                [.insertItem(batchID: try store.createBatch(), position: 0, row: self.row("t\(index)"))]
            )
        }
        let applied = try await stores[0].database.read { try TransferStore.migrator.appliedIdentifiers($0) }
        #expect(applied.count == TransferStore.migrations.count + 1)
        let ids = try await stores[0].database.read { try Set(String.fetchAll($0, sql: "SELECT id FROM transfer")) }
        #expect(ids == Set((0..<6).map { "t\($0)" }))
    }

    @Test func aNewStoreIsCreatedInWriteAheadLogModeWithNormalSynchronisation() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
        #expect(try store.batches().isEmpty)
        let (mode, synchronous) = try store.database.write { db in
            (try String.fetchOne(db, sql: "PRAGMA journal_mode"), try Int.fetchOne(db, sql: "PRAGMA synchronous"))
        }
        #expect(mode == "wal")
        #expect(synchronous == 1, "NORMAL on the store's own connection")
    }

    @Test func aDatabaseFileMadeWithoutTheWriteAheadLogIsSwitchedToItWhenOpenedAsAStore() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appending(path: "state.sqlite")
        // Made by another program, with SQLite's default rollback journal.
        try DatabaseQueue(path: path.path).write { try $0.execute(sql: "CREATE TABLE other (x INTEGER)") }

        let store = try TransferStore(path: path)
        #expect(try store.batches().isEmpty)
        let mode = try store.database.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") }
        #expect(mode == "wal")
        let reopened = try DatabaseQueue(path: path.path).read { try String.fetchOne($0, sql: "PRAGMA journal_mode") }
        #expect(reopened == "wal", "kept in the file")
    }

    /// What `haul status --json` read from the fixture `state-v6.sqlite` with the release that wrote it: three
    /// batches, the first two of 40 small files each, most of them kept 32 to a slice, some completed in their
    /// slice, the second killed part-way; the third with a failure.
    struct ExpectedBatch: Decodable {
        var id: Int
        var listComplete: Bool
        var states: [String: Int]
        var bytesOnDisk: Int64
        var items: [ExpectedItem]
    }

    struct ExpectedItem: Decodable, Equatable {
        var id: String
        var url: String
        var state: String
        var bytes: Int64
        var total: Int64?
        var attempts: Int
        var path: String?
        var operation: String
        var errorCode: String?
        var errorMessage: String?
        var httpStatus: Int?
    }

    @Test func aStoreWrittenWithSlicesIsMigratedToOneRowPerTransferWithNothingLost() throws {
        let fixture = try #require(Bundle.module.url(forResource: "Fixtures/state-v6", withExtension: "sqlite"))
        let expectedURL = try #require(Bundle.module.url(forResource: "Fixtures/state-v6", withExtension: "json"))
        let expected = try JSONDecoder().decode([ExpectedBatch].self, from: Data(contentsOf: expectedURL))
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appending(path: "state.sqlite")
        try FileManager.default.copyItem(at: fixture, to: path)

        let store = try TransferStore(path: path)
        let batches = try store.batches()
        #expect(batches.map(\.id.rawValue) == expected.map(\.id))
        for (batch, want) in zip(batches, expected) {
            #expect(batch.transferCounts == want.states, "batch \(want.id)")
            #expect(batch.bytesOnDisk == want.bytesOnDisk, "batch \(want.id)")
            #expect(batch.isListComplete == want.listComplete)
            let items = try store.transfers(inBatch: batch.id).map { transfer in
                ExpectedItem(
                    id: transfer.id.rawValue,
                    url: transfer.url.absoluteString,
                    state: transfer.state,
                    bytes: transfer.bytesOnDisk,
                    total: transfer.totalBytes,
                    attempts: transfer.attempts,
                    path: transfer.finalPath?.path,
                    operation: transfer.operation,
                    errorCode: transfer.errorCode,
                    errorMessage: transfer.errorMessage,
                    httpStatus: transfer.httpStatus
                )
            }
            #expect(items == want.items, "batch \(want.id)")
        }
        let (tables, rows) = try store.database.read { db in
            (
                try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"),
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM transfer")
            )
        }
        #expect(!tables.contains("slice") && !tables.contains("sliceEntry") && !tables.contains("sliceResult"))
        #expect(rows == 82, "one row per transfer: 40 + 40 + 2")
        // The waiting transfers of the killed batch are rows a manager can claim and run.
        let waiting = try #require(try store.rows(inBatch: BatchID(2)).first { $0.state == "waiting" })
        #expect(waiting.request?.url.absoluteString == waiting.url)
        let claim = try store.database.write { try store.claim(TransferID(waiting.id), owner: "A", in: $0) }
        guard case .claimed = claim else { Issue.record("not claimed: \(claim)"); return }
    }

    @Test func aStoreWrittenBeforeBatchEntriesKeepsItsBatchesTheirOrderAndTheirTransfersOnceMigrated() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appending(path: "state.sqlite")
        // A store as the fourth migration left it: two batches, one transfer in both, items out of position order.
        let old = try DatabaseQueue(path: path.path)
        var migrator = DatabaseMigrator()
        for (identifier, sql) in TransferStore.migrations.prefix(4) {
            migrator.registerMigration(identifier) { db in try db.execute(sql: sql) }
        }
        try migrator.migrate(old)
        try old.write { db in
            try db.execute(sql: "INSERT INTO batch (id, createdAt) VALUES (1, 0), (2, 0)")
            for (id, state) in [("a", "completed"), ("b", "waiting"), ("c", "failed")] {
                try db.execute(
                    sql: """
                        INSERT INTO transfer (id, url, destinationKind, destinationPath, folder, nameComponents,
                            usesContentDisposition, conflictPolicy, headers, computesSHA256, state, updatedAt)
                        VALUES (?, ?, 'folder', '/tmp/x', '/tmp/x', ?, 0, 'rename', '[]', 0, ?, 0)
                        """,
                    arguments: [id, "http://h/\(id)", "[\"\(id)\"]", state]
                )
            }
            try db.execute(
                sql:
                    "INSERT INTO batchItem (batchID, position, transferID) VALUES (1, 2, 'c'), (1, 0, 'a'), (1, 1, 'b')"
            )
            try db.execute(sql: "INSERT INTO batchItem (batchID, position, transferID) VALUES (2, 0, 'a')")
        }
        try old.close()

        let store = try TransferStore(path: path)
        #expect(try store.transfers(inBatch: BatchID(1)).map(\.id) == ["a", "b", "c"])
        #expect(try store.transfers(inBatch: BatchID(2)).map(\.id) == ["a"])
        #expect(try store.unfinishedBatches().map(\.id) == [BatchID(1)])
        let tables = try store.database.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT name, sql FROM sqlite_master WHERE name LIKE 'batchItem%' OR name = 'batchEntry'"
            )
        }
        #expect(tables.map { $0["name"] as String } == ["batchEntry"], "the old table and its index are gone")
        #expect((tables.first?["sql"] as String?)?.hasSuffix("WITHOUT ROWID") == true)
        #expect(try store.forgetFinishedBatches() == 1)
        #expect(try store.transfer("a") != nil, "still in the unfinished batch")
        #expect(try store.transfers(inBatch: BatchID(2)).isEmpty)

        // New items go in after the migrated ones, in their batch's order.
        try store.apply(owner: "A", [.insertItem(batchID: BatchID(1), position: 3, row: self.row("d"))])
        #expect(try store.transfers(inBatch: BatchID(1)).map(\.id) == ["a", "b", "c", "d"])
    }

    @Test func theDigestsOfItsIdentifiersKnowEveryStoredTransferAndNoOther() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let stored = (0..<500).map { "stored-\($0)" } + ["", "naïve 日本語", String(repeating: "x", count: 300)]
        try store.apply(
            owner: "A",
            stored.enumerated().map { .insertItem(batchID: batch, position: $0, row: self.row($1)) }
        )
        let digests = try store.transferIDDigests()
        #expect(digests.count == stored.count)
        #expect(stored.allSatisfy { digests.mayContain(TransferID($0)) })
        #expect(!(0..<500).contains { digests.mayContain(TransferID("new-\($0)")) })
        #expect(!digests.mayContain(TransferID("stored-1 ")), "a digest of the whole text, not a prefix")
        #expect(!TransferIDDigests().mayContain(TransferID("stored-1")))
    }

    @Test func requestsAreLookedForOneByOneUntilTheyOutnumberTheStoresRowsThenItsIdentifiersAreReadOnce() {
        var digests = TransferIDDigests()
        Array("known".utf8).withUnsafeBytes { digests.insert($0) }
        var (rowsAsked, reads) = (0, 0)
        var ids = StoredIDs.unknown
        let ask = { (ids: inout StoredIDs, count: Int) -> Bool in
            ids.digests(
                for: count,
                holdsNoTransfers: false,
                rowsAtMost: {
                    rowsAsked += 1
                    return 100
                },
                read: {
                    reads += 1
                    return digests
                }
            ) != nil
        }
        #expect([32, 32, 32, 4].map { ask(&ids, $0) } == [false, false, false, false], "100 rows, 100 looked for")
        #expect(ask(&ids, 1), "the 101st: the identifiers")
        #expect(ask(&ids, 32))
        #expect(
            ids.digests(for: 1, holdsNoTransfers: false, rowsAtMost: { 0 }, read: { .init() })?.mayContain("known")
                == true
        )
        #expect((rowsAsked, reads) == (1, 1))

        var created = StoredIDs.unknown
        let none = created.digests(for: 1, holdsNoTransfers: true, rowsAtMost: { 1 }, read: { digests })
        #expect(none?.count == 0, "a store just created: nothing read, nothing known")
        var large = StoredIDs.unknown
        #expect(large.digests(for: 33, holdsNoTransfers: false, rowsAtMost: { 32 }, read: { digests }) != nil)
    }

    @Test func aStoreCreatedWhenOpenedHoldsNoTransfersUntilOneIsWritten() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appending(path: "state.sqlite")
        let store = try TransferStore(path: path)
        #expect(store.holdsNoTransfers)
        _ = try store.createBatch()
        #expect(store.holdsNoTransfers, "a batch is not a transfer")
        try store.apply(owner: "A", [.insertItem(batchID: try store.createBatch(), position: 0, row: self.row("a"))])
        #expect(!store.holdsNoTransfers)
        #expect(try !TransferStore(path: path).holdsNoTransfers, "a store that was there may hold transfers")
    }

    @Test func aRunOfInsertsWrittenInBulkLeavesTheRowsAndEntriesThatOneAtATimeLeaves() throws {
        // 40 inserts through the writer: 32 in one statement, then 8 one at a time; one row already held by another.
        let (bulk, single) = (try TransferStore(), try TransferStore())
        let batch = try bulk.createBatch()
        #expect(try single.createBatch() == batch)
        let operations = (0..<40).map { index -> StoreOperation in
            var row = self.row(String(format: "b%02d", index))
            row.checksum = index.isMultiple(of: 2) ? "sha256:\(String(repeating: "a", count: 64))" : nil
            row.expectedSize = index.isMultiple(of: 3) ? Int64(index) : nil
            row.etag = index.isMultiple(of: 5) ? "\"e\(index)\"" : nil
            return .insertItem(batchID: batch, position: index, row: row)
        }
        for store in [bulk, single] {
            try store.apply(owner: "B", [.insertItem(batchID: batch, position: 99, row: self.row("b07"))])
        }
        let writer = StoreWriter(store: bulk)
        for operation in operations { writer.enqueue(operation) }
        writer.flush()
        try single.apply(owner: writer.owner, operations)
        let ids = operations.compactMap(\.insertedID)
        for (written, expected) in zip(try bulk.rows(ids), try single.rows(ids)) {
            var (written, expected) = (try #require(written), try #require(expected))
            #expect(abs(written.updatedAt - expected.updatedAt) < 60 && written.updatedAt > 0)
            #expect(abs((written.leaseExpires ?? 0) - (expected.leaseExpires ?? 0)) < 60)
            (written.updatedAt, written.leaseExpires, expected.updatedAt, expected.leaseExpires) = (0, nil, 0, nil)
            #expect(written == expected)
        }
        #expect(try bulk.rows(ids).map { $0?.leaseOwner } == ids.map { $0.rawValue == "b07" ? "B" : writer.owner })
        #expect(try bulk.rows(inBatch: batch).map(\.id) == single.rows(inBatch: batch).map(\.id))
        #expect(try bulk.transfers(inBatch: batch).count == 41)
    }

    @Test func aCompletedRowSubmittedAgainIsReopenedAndLeasedByItsInsertUnlessItChangedOrIsHeld() throws {
        let store = try TransferStore()
        let ids = (0..<12).map { String(format: "c%02d", $0) }
        // Completed by a process that is gone: its publishing records kept the leases.
        let dead = "\(LeaseOwner.hostName())/2147483000/x"
        let first = try store.createBatch()
        try store.apply(
            owner: dead,
            ids.enumerated().flatMap { position, id -> [StoreOperation] in
                [.insertItem(batchID: first, position: position, row: self.row(id)), self.publishing(id)]
            }
        )
        // c11 is held by a live process elsewhere.
        try store.database.write { db in
            try db.execute(
                sql: "UPDATE transfer SET leaseOwner = 'elsewhere/1/y', leaseExpires = ? WHERE id = 'c11'",
                arguments: [Date().timeIntervalSince1970 + 60]
            )
        }
        let read = try store.rows(ids.map { TransferID($0) }).map { try #require($0) }
        let second = try store.createBatch()
        let operations: [StoreOperation] = ids.indices.flatMap { position -> [StoreOperation] in
            let (id, row) = (ids[position], read[position])
            // c10 changed after it was read.
            let completedAt = id == "c10" ? row.updatedAt - 1 : row.updatedAt
            return [
                .reopen(TransferID(id), completedAt: completedAt, staleHolder: row.leaseOwner == dead ? dead : nil),
                .insertItem(batchID: second, position: position, row: self.row(id)),
            ]
        }
        let leased = try store.database.write { db in
            try operations.compactMap { operation in try operation.apply(db, owner: "A") ? operation.insertedID : nil }
        }
        #expect(leased.map(\.rawValue) == Array(ids[0..<10]))
        let rows = try store.rows(ids.map { TransferID($0) }).map { try #require($0) }
        #expect(rows[0..<10].allSatisfy { $0.state == "waiting" && $0.leaseOwner == "A" })
        #expect(rows[10].state == "completed" && rows[10].leaseOwner == dead, "changed since: left to the claim")
        #expect(rows[11].state == "completed" && rows[11].leaseOwner == "elsewhere/1/y", "held: left alone")
        #expect(try store.rows(inBatch: second).map(\.id) == ids, "every transfer joins the batch")
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
        #expect(JSONText.strings(text) == strings, "read back as written")
    }

    @Test func writesJSONTextAsRowsHaveAlwaysHeldIt() {
        #expect(JSONText.array(["f000123.bin"]) == #"["f000123.bin"]"#)
        #expect(JSONText.array([]) == "[]")
        #expect(JSONText.array(["a\"b\\c", "\n\r\t\u{1}\u{1f}", "é"]) == #"["a\"b\\c","\n\r\t\u0001\u001f","é"]"#)
        #expect(JSONText.array([#"["x"]"#, "[]"], elementsAreJSON: true) == #"[["x"],[]]"#)
    }

    @Test(arguments: [
        (#"["a\/b","c"]"#, ["a/b", "c"] as [String]?),
        (#"[ "spaced" , "out" ]"#, ["spaced", "out"]),
        (#"["a""b"]"#, nil), (#"["a""#, nil), (#"[a]"#, nil), (#"[1]"#, nil), (#""#, nil),
        (#"{"a":"b"}"#, nil), (#"["unterminated]"#, nil),
    ])
    func readsAnyJSONArrayOfStringsAndNothingElse(text: String, strings: [String]?) {
        #expect(JSONText.strings(text) == strings, "\(text)")
    }

    @Test func readsEachColumnOfARowAsGRDBsDecodingDoes() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        var full = self.row("full")
        full.checksum = "sha256:00ff"
        full.expectedSize = 1 << 40
        full.computesSHA256 = true
        full.usesContentDisposition = true
        full.destinationKind = "file"
        full.totalSize = 123
        full.etag = "\"e\""
        full.lastModified = "Wed, 21 Oct 2015 07:28:00 GMT"
        full.updatedAt = 1_700_000_000.25
        full.nameComponents = JSONText.array(["naïve café 🎉", "x"])
        full.operation = #"{"kind":"delete","treatsNotFoundAsSuccess":true}"#
        try store.apply(
            owner: "A",
            [
                .insertItem(batchID: batch, position: 0, row: full),
                .insertItem(batchID: batch, position: 1, row: self.row("bare")),
                .checkpoint("full", bytesOnDisk: 77),
                .publishing("full", finalPath: "/tmp/x/full", size: 123, sha256: "ab", modified: 1.5),
                .failed("bare", HaulError(.httpStatus, "Not Found", httpStatus: 404), attempts: 3),
            ]
        )
        let decoded = try store.database.read { db in
            try TransferRow.fetchAll(db, sql: "SELECT * FROM transfer ORDER BY id DESC")
        }
        #expect(decoded.map(\.id) == ["full", "bare"])
        #expect(decoded[0].finalModified == 1.5 && decoded[0].leaseOwner == "A" && decoded[1].httpStatus == 404)
        #expect(try store.rows(["full", "bare"]) == decoded)
        #expect(try store.rows(inBatch: batch) == decoded, "in the batch's order")
    }

    @Test func readsRowsInTheOrderAskedWithNothingForATransferItDoesNotHold() throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        try store.apply(
            owner: "A",
            ["a", "b", ""].enumerated().map { .insertItem(batchID: batch, position: $0, row: self.row($1)) }
        )
        #expect(try store.rows(["b", "nope", "a", "b", ""]).map { $0?.id } == ["b", nil, "a", "b", ""])
        #expect(try store.rows([]).isEmpty)
    }

    @Test func aDownloadsOperationIsWhatTheEncoderWouldWrite() throws {
        let decoded = try JSONDecoder().decode(StoredOperation.self, from: Data(StoredOperation.downloadJSON.utf8))
        #expect(decoded == StoredOperation(.download))
    }

    @Test func publishingRecordsThatArriveWithinTheWaitShareATransactionAndAreWrittenWhenTheirWaitEnds() async throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        // A wait of 3 s: the records arrive over 80 ms, and a loaded machine has taken longer than 300 ms to wake them.
        let writer = StoreWriter(store: store, publishingLinger: .seconds(3))
        let ids = (0..<16).map { "f\($0)" }
        for (position, id) in ids.enumerated() {
            writer.enqueue(.insertItem(batchID: batch, position: position, row: self.row(id)))
        }
        writer.flush()
        let before = writer.transactionCount
        let written = await withTaskGroup(of: String?.self, returning: [String?].self) { group in
            // One every 5 ms, as files finishing one after another: each would find the writer idle and take a
            // transaction of its own without the wait (3 s, far longer than the 80 ms they take to arrive).
            for (index, id) in ids.enumerated() {
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(5 * index))
                    await writer.flushAndWait(
                        adding: .publishing(
                            TransferID(id),
                            finalPath: "/tmp/x/\(id)",
                            size: 5,
                            sha256: nil,
                            modified: 1
                        )
                    )
                    return try? store.row(TransferID(id))?.finalPath
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(written) == Set(ids.map { "/tmp/x/\($0)" }), "each record is in the database when its wait ends")
        #expect(writer.transactionCount - before <= 2, "sixteen records, one transaction (two if one came late)")
        #expect(writer.lastError == nil)
    }

    @Test func aPublishingRecordThatArrivesWhileATransactionRunsWaitsForOthersAfterIt() async throws {
        let (store, writer) = try self.lingeringWriter(rows: ["during", "last"])
        // The database's writer is held, so the next transaction (the periodic flush's, which starts at once) runs
        // until it is let go, and the publishing record comes while it runs.
        let hold = DispatchSemaphore(value: 0)
        let held = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            store.database.writeWithoutTransaction { _ in
                held.signal()
                hold.wait()
            }
        }
        held.wait()
        writer.flushInBackground()
        let during = Task { await writer.flushAndWait(adding: self.publishing("during")) }
        let started = ContinuousClock.now
        try await self.waitUntil { writer.queuedJobCount > 0 }
        #expect(writer.queuedJobCount == 1, "the record waits for the running transaction")
        hold.signal()
        try await self.waitUntil { writer.isLingering }
        #expect(writer.isLingering, "after the transaction it came during, the record waits for others")
        #expect(try store.row("during")?.finalPath == nil, "and is not written yet")
        await writer.flushAndWait(adding: self.publishing("last"), lingering: false)
        await during.value
        #expect(ContinuousClock.now - started < .seconds(30), "the last record cut the wait short")
        #expect(try store.row("during")?.finalPath == "/tmp/x/during")
        #expect(try store.row("last")?.finalPath == "/tmp/x/last")
    }

    @Test func aPublishingRecordWithNoOneToWaitForIsWrittenWithoutTheWait() async throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let writer = StoreWriter(store: store, publishingLinger: .seconds(60))
        writer.enqueue(.insertItem(batchID: batch, position: 0, row: self.row("last")))
        let started = ContinuousClock.now
        await writer.flushAndWait(adding: self.publishing("last"), lingering: false)
        #expect(ContinuousClock.now - started < .seconds(30), "not the writer's minute")
        #expect(try store.row("last")?.finalPath == "/tmp/x/last")
    }

    @Test func aPublishingRecordWithNoOneToWaitForCutsShortAWaitUnderWayAndTakesItsRecordsAlong() async throws {
        let (store, writer) = try self.lingeringWriter(rows: ["early", "last"])
        let started = ContinuousClock.now
        let early = Task { await writer.flushAndWait(adding: self.publishing("early")) }
        try await self.waitUntil { writer.isLingering }
        #expect(writer.isLingering, "the first record waits for others")
        await writer.flushAndWait(adding: self.publishing("last"), lingering: false)
        await early.value
        #expect(ContinuousClock.now - started < .seconds(30), "neither waited for the writer's minute")
        #expect(try store.row("early")?.finalPath == "/tmp/x/early")
        #expect(try store.row("last")?.finalPath == "/tmp/x/last")
        #expect(!writer.isLingering, "the wait, cut short, starts no transaction of its own when it ends")
    }

    @Test func aTransactionsPublicationsAreCalledBackOnOneLoopInTheOrderOfTheirRecords() async throws {
        let (store, writer) = try self.lingeringWriter(rows: ["a", "b", "c", "d", "e"])
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        // Each callback notes its record and the loop it ran on (`nil`: neither, the writer's queue).
        let calls = NIOLockedValueBox<[(id: String, ranOn: Int?)]>([])
        func publish(_ id: String, on loop: Int?, lingering: Bool = true) {
            writer.flush(adding: self.publishing(id), lingering: lingering, on: loop.map { loops[$0] }) {
                let ranOn = loops.firstIndex { $0.inEventLoop }
                calls.withLockedValue { $0.append((id, ranOn)) }
            }
        }
        publish("a", on: 0)
        publish("b", on: 1)
        publish("c", on: nil)
        publish("d", on: 0)
        try await self.waitUntil { writer.isLingering }
        publish("e", on: 1, lingering: false)
        try await self.waitUntil { calls.withLockedValue { $0.count } == 5 }
        let made = calls.withLockedValue { $0 }
        #expect(writer.transactionCount == 2, "the rows' transaction, then one for the five records")
        // The callbacks rename files, most into one folder: on two loops at once, each waited on the folder's lock.
        #expect(
            made.filter { $0.ranOn == 0 }.map(\.id) == ["a", "b", "d", "e"],
            "on the first record's loop, in order"
        )
        #expect(made.filter { $0.ranOn == nil }.map(\.id) == ["c"], "asked for no loop: on the writer's queue")
        #expect(try store.row("e")?.finalPath == "/tmp/x/e")
        try await group.shutdownGracefully()
    }

    @Test func aRecordForALoopWaitsOnThatLoopsTimerAndIsWrittenWhenTheWaitEnds() async throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let writer = StoreWriter(store: store, publishingLinger: .milliseconds(50))
        writer.enqueue(.insertItem(batchID: batch, position: 0, row: self.row("a")))
        writer.flush()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        // The loop kept busy well past the wait: its timer cannot fire meanwhile, where another thread's could.
        let busy = DispatchSemaphore(value: 0)
        loop.execute { busy.wait() }
        let ranOnLoop = NIOLockedValueBox<Bool?>(nil)
        writer.flush(adding: self.publishing("a"), lingering: true, on: loop) {
            ranOnLoop.withLockedValue { $0 = loop.inEventLoop }
        }
        #expect(writer.isLingering, "waiting for others to share the transaction")
        try await Task.sleep(for: .milliseconds(300))
        #expect(try store.row("a")?.finalPath == nil, "the wait ends when the loop's timer fires, not before")
        busy.signal()
        try await self.waitUntil { ranOnLoop.withLockedValue { $0 } != nil }
        #expect(ranOnLoop.withLockedValue { $0 } == true)
        #expect(try store.row("a")?.finalPath == "/tmp/x/a", "written when the loop's timer ended the wait")
        #expect(!writer.isLingering)
        try await group.shutdownGracefully()
    }

    @Test func aLaterTransactionsPublicationsWaitForTheEarlierOnesAndFollowThemOnTheirLoop() async throws {
        let (_, writer) = try self.lingeringWriter(rows: ["a", "b"])
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let calls = NIOLockedValueBox<[(id: String, ranOn: Int?)]>([])
        let releaseA = NIOLockedValueBox(false)
        // a's callback holds its loop until told to go on; b commits meanwhile, for the other loop.
        writer.flush(adding: self.publishing("a"), lingering: false, on: loops[0]) {
            calls.withLockedValue { $0.append(("a", loops.firstIndex { $0.inEventLoop })) }
            while !releaseA.withLockedValue({ $0 }) { usleep(1_000) }
        }
        try await self.waitUntil { calls.withLockedValue { $0.count } == 1 }
        writer.flush(adding: self.publishing("b"), lingering: false, on: loops[1]) {
            calls.withLockedValue { $0.append(("b", loops.firstIndex { $0.inEventLoop })) }
        }
        try await self.waitUntil { writer.transactionCount == 3 }
        try await Task.sleep(for: .milliseconds(50))
        #expect(calls.withLockedValue { $0.count } == 1, "b's callback waits while a's runs")
        releaseA.withLockedValue { $0 = true }
        try await self.waitUntil { calls.withLockedValue { $0.count } == 2 }
        #expect(calls.withLockedValue { $0.map(\.id) } == ["a", "b"])
        #expect(calls.withLockedValue { $0.map(\.ranOn) } == [0, 0], "b's follows a's, on a's loop")
        try await group.shutdownGracefully()
    }

    @Test func aFileStoreKeepsSQLitesTemporaryFilesInMemory() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("haul-temp-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try TransferStore(path: folder.appendingPathComponent("state.sqlite"))
        // 2: memory. A statement that changes many rows in a transaction (a batch's bulk insert) keeps its journal
        // there instead of spilling it into a file under /var/tmp.
        #expect(try store.database.read { try Int.fetchOne($0, sql: "PRAGMA temp_store") } == 2)
    }

    @Test func aFileStoreCopiesItsLogIntoTheDatabaseOnlyPastFourThousandPages() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("haul-log-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try TransferStore(path: folder.appendingPathComponent("state.sqlite"))
        // SQLite's 1,000 pages copied the pages a long batch rewrites in every transaction again at each copy.
        #expect(try store.database.read { try Int.fetchOne($0, sql: "PRAGMA wal_autocheckpoint") } == 4_000)
        let reopened = try TransferStore(path: folder.appendingPathComponent("state.sqlite"))
        #expect(try reopened.database.read { try Int.fetchOne($0, sql: "PRAGMA wal_autocheckpoint") } == 4_000)
    }

    @Test func memoryStatisticsCannotBeTurnedOffOnceSQLiteIsInUse() throws {
        let store = try TransferStore()
        #expect(!TransferStore.disableMemoryStatistics(), "SQLite refuses the change once it is initialized")
        #expect(try store.batches().isEmpty, "and the store works on")
    }

    @Test func aClaimWritesTheQueueOnlyUpToItsOwnRowAndTheRestFollowsInOrder() async throws {
        let store = try TransferStore()
        let batch = try store.createBatch()
        let writer = StoreWriter(store: store)
        let ids = (0..<500).map { String(format: "q%03d", $0) }
        for (position, id) in ids.enumerated() {
            writer.enqueue(.insertItem(batchID: batch, position: position, row: self.row(id)))
        }
        // Not leased at insert yet (nothing is written): the claim goes to the database.
        guard case .claimed = await writer.claim("q002") else {
            Issue.record("the claim")
            return
        }
        #expect(try store.row("q002")?.leaseOwner == writer.owner)
        #expect(try store.row("q000") != nil, "what was queued before it")
        #expect(try store.row("q003") == nil, "what was queued after it waits for the next transaction")
        writer.flush()
        #expect(try store.rows(inBatch: batch).map(\.id) == ids)
    }
}
