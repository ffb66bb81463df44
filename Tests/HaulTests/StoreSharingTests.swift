import Foundation
import GRDB
import Testing

@testable import Haul

@Suite("A writer alone on its store, and sharing it")
struct StoreSharingTests {
    /// A new file store in a folder of its own, removed after `body`.
    func withFileStore(_ body: (URL) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("haul-sharing-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await body(folder.appendingPathComponent("state.sqlite"))
    }

    func newRow(_ id: String, batch: BatchID, position: Int = 0) -> InsertedRow {
        var row = TransferRow.waitingDownload(id: id, url: "http://h/\(id)", folder: "/tmp/x")
        row.nameComponents = "[\"\(id)\"]"
        return InsertedRow(batchID: batch, position: position, row: row, id: TransferID(id))
    }

    func publishing(_ id: String) -> StoreOperation {
        .publishing(TransferID(id), finalPath: "/tmp/x/\(id)", size: 5, sha256: "ab", modified: 1)
    }

    /// How many rows SQLite has changed through the store's connection since it opened.
    func changes(_ store: TransferStore) throws -> Int {
        try store.database.read { $0.totalChangesCount }
    }

    /// Waits until `condition` holds, for at most 10 s.
    func waitUntil(_ condition: () -> Bool) async throws {
        let started = ContinuousClock.now
        while !condition(), ContinuousClock.now - started < .seconds(10) {
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    @Test func aManagersWriterAloneOnItsStoreWritesANewFilesRowOnceCompletedWithoutAClaimTransaction() async throws {
        try await self.withFileStore { path in
            let store = try TransferStore(path: path)
            let batch = try store.createBatch()
            let writer = StoreWriter(store: store, publishingLinger: .zero, holdsNewRows: true)
            #expect(writer.sharing.standing == .alone)
            writer.enqueueNew(self.newRow("small", batch: batch))
            #expect(writer.heldCount == 1)
            let before = (transactions: writer.transactionCount, changes: try self.changes(store))
            guard case .claimed = await writer.claim("small") else {
                Issue.record("the claim")
                return
            }
            #expect(writer.transactionCount == before.transactions, "no one else can take it: no transaction")
            #expect(try store.row("small") == nil, "and nothing written yet")
            await writer.flushAndWait(adding: self.publishing("small"), lingering: false)
            let row = try #require(try store.row("small"))
            #expect(row.state == "completed")
            #expect(row.finalPath == "/tmp/x/small" && row.finalSize == 5 && row.sha256 == "ab")
            #expect(row.leaseOwner == writer.owner, "kept until the rename, as a publishing record keeps it")
            #expect(try store.rows(inBatch: batch).map(\.id) == ["small"])
            #expect(try self.changes(store) - before.changes == 2, "the row and its batch entry, each written once")
            #expect(writer.heldCount == 0)
            #expect(writer.lastError == nil)
        }
    }

    @Test func fifteenFilesFinishingTogetherAreWrittenInOneTransactionEachRowCompletedWithItsBatchEntry() async throws {
        try await self.withFileStore { path in
            let store = try TransferStore(path: path)
            let batch = try store.createBatch()
            // A minute's wait: all fifteen records share the transaction the last one starts.
            let writer = StoreWriter(store: store, publishingLinger: .seconds(60), holdsNewRows: true)
            let ids = (0..<15).map { "f\($0)" }
            for (position, id) in ids.enumerated() {
                writer.enqueueNew(self.newRow(id, batch: batch, position: position))
            }
            let before = (transactions: writer.transactionCount, changes: try self.changes(store))
            await withTaskGroup(of: Void.self) { group in
                for id in ids.dropLast() {
                    group.addTask { await writer.flushAndWait(adding: self.publishing(id)) }
                }
                try? await self.waitUntil { writer.queuedJobCount == ids.count - 1 }
                await writer.flushAndWait(adding: self.publishing(ids.last!), lingering: false)
                await group.waitForAll()
            }
            #expect(writer.transactionCount - before.transactions == 1)
            // 15 = 8 + 4 + 2 + 1: each row and each entry written once, by four statements per table.
            #expect(try self.changes(store) - before.changes == 30)
            #expect(try store.rows(inBatch: batch).map(\.id) == ids)
            #expect(try store.rows(inBatch: batch).allSatisfy { $0.state == "completed" && $0.finalSize == 5 })
            #expect(try store.rows(inBatch: batch).map(\.finalPath) == ids.map { "/tmp/x/\($0)" })
            #expect(writer.lastError == nil)
        }
    }

    @Test func aHeldRowIsWrittenByThePeriodicFlushAfterNextAndLeasedToItsWriter() async throws {
        try await self.withFileStore { path in
            let store = try TransferStore(path: path)
            let batch = try store.createBatch(listComplete: false)
            let writer = StoreWriter(store: store, holdsNewRows: true)
            writer.enqueueNew(self.newRow("queued", batch: batch))
            writer.enqueue(.listComplete(batch))
            writer.flushInBackground()
            try await Task.sleep(for: .milliseconds(50))
            #expect(try store.row("queued") == nil, "one periodic flush: still held")
            #expect(try store.batches().first?.isListComplete == false, "and the list not complete before its rows")
            writer.flushInBackground()
            try await self.waitUntil { (try? store.row("queued")) != nil }
            let row = try #require(try store.row("queued"))
            #expect(row.state == "waiting" && row.leaseOwner == writer.owner)
            try await self.waitUntil { (try? store.batches().first?.isListComplete) == true }
            #expect(try store.batches().first?.isListComplete == true)
        }
    }

    @Test func anyOtherChangeToAHeldTransferWritesItsRowFirst() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("haul-sharing-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try TransferStore(path: folder.appendingPathComponent("state.sqlite"))
        let batch = try store.createBatch()
        let writer = StoreWriter(store: store, holdsNewRows: true)
        writer.enqueueNew(self.newRow("paused", batch: batch, position: 0))
        writer.enqueueNew(self.newRow("other", batch: batch, position: 1))
        writer.enqueue(.state("paused", .paused, attempts: 1))
        #expect(writer.heldCount == 1, "only the paused transfer's row leaves")
        writer.flush()
        #expect(try store.row("paused")?.state == "paused")
        #expect(try store.row("other") != nil, "a blocking flush writes every held row")
    }

    @Test func aStoreInMemoryHoldsNothingBack() throws {
        let store = try TransferStore()
        let writer = StoreWriter(store: store, holdsNewRows: true)
        #expect(writer.sharing.standing == .sharing)
        writer.enqueueNew(self.newRow("now", batch: try store.createBatch()))
        #expect(writer.heldCount == 0)
        writer.flush()
        #expect(try store.row("now")?.leaseOwner == writer.owner)
    }

    @Test func aSecondWriterWaitsUntilTheOneAloneHasWrittenAndLeasedWhatItHeldThenBothShare() async throws {
        try await self.withFileStore { path in
            let store = try TransferStore(path: path)
            let batch = try store.createBatch()
            let first = StoreWriter(store: store, holdsNewRows: true)
            first.enqueueNew(self.newRow("running", batch: batch))
            guard case .claimed = await first.claim("running") else {
                Issue.record("the first claim")
                return
            }
            // Another manager on the same file (a second process opens its own store; one suffices here).
            let second = StoreWriter(store: try TransferStore(path: path), holdsNewRows: true)
            #expect(second.sharing.standing == .waiting)
            let claim = Task { await second.claim("running") }
            try await Task.sleep(for: .milliseconds(50))
            #expect(second.transactionCount == 0, "nothing is written while the first is alone")
            first.flushInBackground()
            try await self.waitUntil { second.sharing.standing == .sharing }
            #expect(first.sharing.standing == .sharing && second.sharing.standing == .sharing)
            guard case .heldElsewhere = await claim.value else {
                Issue.record("the second claim found the first's lease")
                return
            }
            #expect(try store.row("running")?.leaseOwner == first.owner)
            // From now on the first leases every new row before its transfer starts.
            first.enqueueNew(self.newRow("later", batch: batch, position: 1))
            #expect(first.heldCount == 0)
        }
    }

    @Test func aWriterThatEndsLetsTheNextBeAloneAtOnce() async throws {
        try await self.withFileStore { path in
            let store = try TransferStore(path: path)
            let first = StoreWriter(store: store, holdsNewRows: true)
            #expect(first.sharing.standing == .alone)
            first.retire()
            let second = StoreWriter(store: store, holdsNewRows: true)
            #expect(second.sharing.standing == .alone)
            second.retire()
            let sharer = StoreWriter(store: store)
            #expect(sharer.sharing.standing == .sharing, "a writer that never holds rows back shares from the start")
            let third = StoreWriter(store: store, holdsNewRows: true)
            #expect(third.sharing.standing == .sharing, "not alone beside it")
        }
    }
}
