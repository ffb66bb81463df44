import Foundation
import Haul
import HaulTesting
import NIOConcurrencyHelpers
import Testing

@Suite("Identifiers, activity, downloadable models and groups of managers", .timeLimit(.minutes(2)))
struct LibrarySurfaceTests {
    static let body = FaultInjectingServer.body(size: 300_000, seed: 11)

    @Test func aCallerChosenIdentifierIsAnsweredByANewManagerOnTheSameStore() async throws {
        try await FaultInjectingServer.withServer(resources: ["/a": .init(body: Self.body)]) { server in
            try await withTemporaryDirectory { folder in
                var configuration = TransferManager.Configuration.testing()
                configuration.store = try TransferStore(path: folder.appending(path: "state.sqlite"))
                let request = TransferRequest(url: server.url("/a"), destination: .folder(folder), id: "episode-1")
                _ = try await TransferManager.withTransferManager(configuration: configuration) {
                    try await $0.enqueue(request).report()
                }
                let (state, progress, unknown) = try await TransferManager.withTransferManager(
                    configuration: configuration
                ) { manager in
                    (manager.state(of: "episode-1"), manager.progress(of: "episode-1"), manager.state(of: "nope"))
                }
                #expect(state == .completed)
                #expect(progress?.receivedBytes == Int64(Self.body.count))
                #expect(progress?.fractionCompleted == 1)
                #expect(unknown == nil)
            }
        }
    }

    @Test func theRunningCountIsObservableAndNeverExceedsTheLimit() async throws {
        var resources: [String: FaultInjectingServer.Resource] = [:]
        for index in 0..<5 {
            resources["/\(index)"] = .init(body: Self.body, chunkSize: 30_000, chunkDelay: .milliseconds(5))
        }
        try await FaultInjectingServer.withServer(resources: resources) { server in
            try await withTemporaryDirectory { folder in
                let counts = try await TransferManager.withTransferManager(configuration: .testing(concurrent: 2)) {
                    manager in
                    let stream = manager.runningTransferCounts()
                    let batch = try manager.enqueue(
                        (0..<5).map { TransferRequest(url: server.url("/\($0)"), into: folder) }
                    )
                    var counts: [Int] = []
                    for await count in stream {
                        counts.append(count)
                        if count == 0, counts.contains(2) { break }
                    }
                    _ = await batch.report()
                    return counts
                }
                #expect(counts.max() == 2)
                #expect(counts.last == 0)
                #expect(zip(counts, counts.dropFirst()).allSatisfy { $0 != $1 }, "only changes are reported")
            }
        }
    }

    struct Episode: Downloadable {
        var downloadURL: URL
        var localFileURL: URL
    }

    @Test func aDownloadableModelDownloadsKnowsItIsDownloadedAndRemovesItsFile() async throws {
        // Sent over at least 60 ms, so that the transfer is still under way when asked right after it starts.
        let paced = FaultInjectingServer.Resource(body: Self.body, chunkSize: 50_000, chunkDelay: .milliseconds(10))
        try await FaultInjectingServer.withServer(resources: ["/ep.mp3": paced]) { server in
            try await withTemporaryDirectory { folder in
                let episode = Episode(downloadURL: server.url("/ep.mp3"), localFileURL: folder.appending(path: "1.mp3"))
                try await TransferManager.withTransferManager(configuration: .testing()) { manager in
                    #expect(!episode.isDownloaded(in: manager))
                    let batch = try episode.download(with: manager)
                    #expect(episode.isDownloading(in: manager))
                    #expect(await batch.report().isSuccess)
                    #expect(episode.isDownloaded(in: manager))
                    #expect(contents(of: episode.localFileURL) == Self.body)

                    try episode.remove(from: manager)
                    #expect(!episode.isDownloaded(in: manager))
                    #expect(!FileManager.default.fileExists(atPath: episode.localFileURL.path))
                    #expect(try await episode.download(with: manager).report().completed.count == 1)
                    #expect(episode.isDownloaded(in: manager))
                }
                #expect(server.requests.count == 2, "removed, then downloaded again")
            }
        }
    }

    @Test func aGroupOfManagersShowsTheirCombinedProgressAndEvents() async throws {
        let small = FaultInjectingServer.body(size: 100_000, seed: 12)
        try await FaultInjectingServer.withServer(resources: [
            "/photo": .init(body: small, chunkSize: 10_000, chunkDelay: .milliseconds(2)),
            "/video": .init(body: Self.body),
        ]) {
            server in
            try await withTemporaryDirectory { folder in
                let seen = NIOLockedValueBox<[Int: Int]>([:])
                try await TransferManager.withTransferManager(configuration: .testing()) { photos in
                    try await TransferManager.withTransferManager(configuration: .testing()) { videos in
                        let group = TransferManagerGroup([photos, videos])
                        let (listening, listens) = AsyncStream<Void>.makeStream()
                        try await withThrowingTaskGroup(of: Void.self) { tasks in
                            tasks.addTask {
                                // The subscription is forEachEvent's first step, right after this (and the
                                // photo is sent over 20 ms, so that its events come after it).
                                listens.yield()
                                await group.forEachEvent { index, event in
                                    if case .finished = event.kind {
                                        seen.withLockedValue { $0[index, default: 0] += 1 }
                                    }
                                }
                            }
                            // Events reach a group's loop from when it subscribes: the transfers start after.
                            for await _ in listening { break }
                            _ = try await photos.enqueue(TransferRequest(url: server.url("/photo"), into: folder))
                                .report()
                            _ = try await videos.enqueue(TransferRequest(url: server.url("/video"), into: folder))
                                .report()
                            let progress = group.progress
                            #expect(progress.totalFiles == 2)
                            #expect(progress.completedFiles == 2)
                            #expect(progress.transferredBytes == Int64(small.count + Self.body.count))
                            #expect(progress.fractionCompleted == 1)
                            #expect(!group.isActive)
                            #expect(group.runningTransferCount == 0)
                            // Both finished events reach the group's loop before it is stopped.
                            while seen.withLockedValue({ $0.values.reduce(0, +) }) < 2 {
                                try await Task.sleep(for: .milliseconds(5))
                            }
                            tasks.cancelAll()
                        }
                    }
                }
                #expect(seen.withLockedValue { $0 } == [0: 1, 1: 1])
            }
        }
    }
}
