import Benchmark
import Foundation
import Haul
import NIOCore

/// The hot paths of a batch, each measured alone: what a manager does per transfer or per chunk.
let benchmarks: @Sendable () -> Void = {
    // As `haul` does: the store's benchmarks measure what the command pays.
    TransferStore.disableMemoryStatistics()
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .peakMemoryResident],
        warmupIterations: 1,
        maxDuration: .seconds(3),
        maxIterations: 1_000
    )

    // The scheduler with 100,000 transfers waiting over 100 hosts: each iteration ends a running transfer and
    // starts the next (the decision a manager makes per finished file).
    Benchmark("Scheduler: next start among 100,000 waiting", configuration: .init(scalingFactor: .kilo)) {
        benchmark in
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 16, maximumPerHost: 6)
        var running: [TransferID] = []
        for index in 0..<100_000 {
            running += scheduler.enqueue(TransferID("t\(index)"), host: "h\(index % 100)", priority: index % 3)
        }
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            let started = scheduler.runningEnded(running.removeFirst())
            running += started
            blackHole(started)
        }
    }

    // Batch progress over 100,000 transfers: one byte count update and one snapshot per iteration (what a progress
    // tick does for a running transfer).
    Benchmark("Progress: update and snapshot with 100,000 transfers", configuration: .init(scalingFactor: .kilo)) {
        benchmark in
        var tracker = BatchProgressTracker()
        let ids = (0..<100_000).map { TransferID("t\($0)") }
        for id in ids { tracker.added(id, expectedBytes: 1_000_000) }
        var bytes: Int64 = 0
        benchmark.startMeasurement()
        for iteration in benchmark.scaledIterations {
            bytes += 65_536
            tracker.progressed(ids[iteration % ids.count], receivedBytes: bytes % 1_000_000, expectedBytes: 1_000_000)
            blackHole(tracker.snapshot(at: .now))
        }
    }

    // The store's checkpoint writes: 1,000 running transfers each record their byte count, flushed in one
    // transaction as the write-behind writer does every 100 ms.
    Benchmark("Store: 1,000 checkpoints in one flush") { benchmark in
        let store = try StoreFixture(waitingTransfers: 1_000)
        defer { store.remove() }
        let (writer, ids) = (store.writer, store.ids)
        var bytes: Int64 = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            bytes += 65_536
            for id in ids { writer.enqueue(.checkpoint(id, bytesOnDisk: bytes)) }
            writer.flush()
        }
    }

    // What the store pays per small file, without the downloads: its row inserted (with its place in the batch), and
    // the completion recorded before the rename; one flush for the thousand, as the write-behind does.
    Benchmark("Store: 1,000 files inserted and published", configuration: .init(maxIterations: 200)) {
        benchmark in
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try TransferStore(path: folder.appending(path: "state.sqlite"))
        let writer = StoreWriter(store: store)
        let batch = try store.createBatch()
        var position = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            let ids = (position..<position + 1_000).map { TransferID("t\($0)") }
            for id in ids {
                let row = TransferRow.waitingDownload(id: id.rawValue, url: "http://h/\(id)", folder: folder.path)
                writer.enqueue(.insertItem(batchID: batch, position: position, row: row))
                position += 1
            }
            for id in ids {
                let path = folder.appending(path: "\(id).bin")
                writer.enqueue(
                    .publishing(id, finalPath: path.path, size: 16_384, sha256: nil, modified: 1_700_000_000)
                )
            }
            writer.flush()
        }
    }

    // A new state database created, switched to the write-ahead log and migrated: what `haul get` does before its
    // first request when the database does not exist yet (`compare.py` gives Haul a new one per run).
    Benchmark("Store: a new database opened", configuration: .init(maxIterations: 200)) { benchmark in
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var opened = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            let store = try TransferStore(path: folder.appending(path: "state-\(opened).sqlite"))
            blackHole(store)
            opened += 1
        }
    }

    // A transaction per write, each waited for: what a publishing record costs when files finish one at a time (it
    // must be in the database before the file is renamed).
    Benchmark("Store: 1,000 publishing records, a transaction each", configuration: .init(maxIterations: 100)) {
        benchmark in
        let store = try StoreFixture(waitingTransfers: 1_000)
        defer { store.remove() }
        let (writer, ids) = (store.writer, store.ids)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            for id in ids {
                writer.flush(adding: .publishing(id, finalPath: "/x/\(id).bin", size: 16_384, sha256: nil, modified: 1))
            }
        }
    }

    // The file writer: 64 MiB in 64 KiB chunks (what the HTTP client hands over), batched into 256 KiB writes.
    Benchmark("File writer: 64 MiB in 64 KiB chunks", configuration: .init(maxIterations: 20)) { benchmark in
        let folder = FileManager.default.temporaryDirectory.appending(path: "haul-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let chunk = ByteBuffer(repeating: 0x5A, count: 65_536)
        for iteration in benchmark.scaledIterations {
            let path = folder.appending(path: "f\(iteration).part")
            var file = try PartialFile(openingAt: path.path)
            for _ in 0..<1_024 { try file.append(chunk) }
            try file.flush()
            blackHole(file.size)
            _ = consume file
            PartialFile.remove(path.path)
        }
    }
}

/// A store in a fresh folder with `waitingTransfers` rows in one batch, written; ``remove()`` deletes the folder.
struct StoreFixture {
    let folder = FileManager.default.temporaryDirectory.appending(path: "haul-bench-\(UUID().uuidString)")
    let writer: StoreWriter
    let ids: [TransferID]

    init(waitingTransfers count: Int) throws {
        try FileManager.default.createDirectory(at: self.folder, withIntermediateDirectories: true)
        let store = try TransferStore(path: self.folder.appending(path: "state.sqlite"))
        self.writer = StoreWriter(store: store)
        let batch = try store.createBatch()
        self.ids = (0..<count).map { TransferID("t\($0)") }
        for (position, id) in self.ids.enumerated() {
            let row = TransferRow.waitingDownload(
                id: id.rawValue,
                url: "http://h/\(position)",
                folder: self.folder.path
            )
            self.writer.enqueue(.insertItem(batchID: batch, position: position, row: row))
        }
        self.writer.flush()
    }

    func remove() { try? FileManager.default.removeItem(at: self.folder) }
}
