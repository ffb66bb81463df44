import Foundation
import Testing

@testable import Haul

/// The engine's core driven directly, as its driver drives it, without sockets, files or clocks: each step is a fact
/// (a request added, an attempt ended, a pause) and the test checks what the core decided.
struct CoreHarness {
    var core: TransferManager.Core
    let batch: BatchID
    /// The transfers started so far, in order.
    var started: [TransferID] = []
    /// The stop signals fired so far.
    var stopSignals = 0

    init(concurrent: Int = 4, perHost: Int = 6, recordsToStore: Bool = false) {
        var configuration = TransferManager.Configuration()
        configuration.maximumConcurrentTransfers = concurrent
        configuration.maximumTransfersPerHost = perHost
        let (_, deliveries) = AsyncStream<ObserverMailbox>.makeStream()
        self.core = TransferManager.Core(
            configuration: configuration,
            deliveries: deliveries,
            recordsToStore: recordsToStore
        )
        self.core.now = .now
        self.batch = self.core.makeBatch(sealed: true)
    }

    /// Runs one transition, as the driver does, and keeps what it started and stopped.
    mutating func step<T>(_ body: (inout TransferManager.Core, inout TransferManager.Aftermath) -> T) -> T {
        var aftermath = TransferManager.Aftermath()
        let result = body(&self.core, &aftermath)
        self.started += aftermath.starts.map(\.id)
        self.stopSignals += aftermath.stopSignals.count
        return result
    }

    /// Adds downloads of `urls` to the batch; returns their identifiers.
    mutating func add(_ urls: [String]) -> [TransferID] {
        let requests = urls.map {
            TransferRequest(
                url: URL(string: $0)!,
                into: URL(filePath: "/tmp/haul-core-tests", directoryHint: .isDirectory)
            )
        }
        let batch = self.batch
        self.step { core, aftermath in
            for request in requests { core.add(request, to: batch, aftermath: &aftermath) }
        }
        return requests.map(\.id)
    }

    /// Ends `id`'s running attempt with `outcome`, after its start.
    mutating func end(
        _ id: TransferID,
        _ outcome: Download.AttemptOutcome,
        jitter: Double = 0
    ) -> TransferManager.RetryWait? {
        self.step { core, aftermath in
            core.attemptStarted(id, offset: 0)
            return core.attemptEnded(id, outcome: outcome, jitter: jitter, aftermath: &aftermath)
        }
    }

    static func completed(_ name: String) -> Download.AttemptOutcome {
        .completed(CompletedFile(path: URL(filePath: "/tmp/haul-core-tests/\(name)"), byteCount: 5, sha256: nil))
    }
}

@Suite("The engine's core")
struct CoreTests {
    @Test(arguments: [
        // Global limit 2: the first two start, in order.
        (2, 6, ["http://a/1", "http://a/2", "http://a/3"], ["http://a/1", "http://a/2"]),
        // One per host: the second of host a waits, host b starts.
        (4, 1, ["http://a/1", "http://a/2", "http://b/1"], ["http://a/1", "http://b/1"]),
        // Both limits at once.
        (2, 1, ["http://a/1", "http://a/2", "http://b/1", "http://c/1"], ["http://a/1", "http://b/1"]),
    ])
    func startsTransfersUpToTheGlobalAndPerHostLimits(
        concurrent: Int,
        perHost: Int,
        urls: [String],
        expected: [String]
    ) {
        var harness = CoreHarness(concurrent: concurrent, perHost: perHost)
        let ids = harness.add(urls)
        let byID = Dictionary(uniqueKeysWithValues: zip(ids, urls))
        #expect(harness.started.map { byID[$0]! } == expected)
        for id in ids where !harness.started.contains(id) { #expect(harness.core.state(of: id) == .waiting) }
    }

    @Test func anEndedTransferStartsTheNextAndTheLastSettlesTheBatch() {
        var harness = CoreHarness(concurrent: 1)
        let ids = harness.add(["http://a/1", "http://a/2"])
        #expect(harness.started == [ids[0]])
        #expect(harness.end(ids[0], CoreHarness.completed("1")) == nil)
        #expect(harness.started == ids, "the second starts as the first ends")
        #expect(harness.core.state(of: ids[0]) == .completed)
        #expect(harness.core.batches[harness.batch]?.isFinished == false)
        _ = harness.end(ids[1], CoreHarness.completed("2"))
        let report = harness.core.batches[harness.batch]?.report
        #expect(report?.completed.count == 2)
    }

    @Test(arguments: [
        // The default policy: 1 s for the first retry, less up to half of it by the jitter.
        (0.0, Duration.seconds(1)), (1.0, .milliseconds(500)), (0.5, .milliseconds(750)),
    ])
    func aTransientFailureWaitsTheDelayItsJitterGivesAndFreesItsSlot(jitter: Double, delay: Duration) {
        var harness = CoreHarness(concurrent: 1)
        let ids = harness.add(["http://a/1", "http://a/2"])
        let failure = HaulError(.httpStatus, "Service Unavailable", httpStatus: 503)
        let wait = harness.end(ids[0], .failed(failure), jitter: jitter)
        #expect(wait?.delay == delay)
        #expect(wait?.heldHost == nil)
        #expect(harness.core.state(of: ids[0]) == .waitingToRetry)
        #expect(harness.started == ids, "the slot goes to the next transfer during the wait")
    }

    @Test func aPermanentFailureIsNotRetried() {
        var harness = CoreHarness()
        let ids = harness.add(["http://a/1"])
        let wait = harness.end(ids[0], .failed(HaulError(.httpStatus, "Not Found", httpStatus: 404)))
        #expect(wait == nil)
        #expect(harness.core.state(of: ids[0]) == .failed)
    }

    @Test func retryAfterHoldsItsWholeHostButNoOther() {
        var harness = CoreHarness(concurrent: 1)
        let ids = harness.add(["http://a/1", "http://a/2", "http://b/1"])
        var failure = HaulError(.httpStatus, "Too Many Requests", httpStatus: 429)
        failure.retryAfter = .seconds(3)
        let wait = harness.end(ids[0], .failed(failure))
        #expect(wait?.delay == .seconds(3))
        #expect(wait?.heldHost != nil)
        #expect(harness.started == [ids[0], ids[2]], "host a is held: b goes first")
    }

    @Test func aPauseDuringAnAttemptStopsItAndSettlesWhenTheAttemptHasStopped() {
        var harness = CoreHarness()
        let ids = harness.add(["http://a/1"])
        harness.step { core, aftermath in core.pause(ids[0], aftermath: &aftermath) }
        #expect(harness.stopSignals == 1, "the running attempt is asked to stop")
        #expect(harness.core.state(of: ids[0]) == .paused)
        #expect(harness.end(ids[0], .stopped) == nil)
        #expect(harness.core.state(of: ids[0]) == .paused)
        harness.step { core, aftermath in core.resume(ids[0], aftermath: &aftermath) }
        #expect(harness.started == [ids[0], ids[0]], "resumed: started again")
    }

    @Test func aFileThatCompletedWhileItsPauseWasOnTheWayIsReportedCompleted() {
        var harness = CoreHarness()
        let ids = harness.add(["http://a/1"])
        harness.step { core, aftermath in core.pause(ids[0], aftermath: &aftermath) }
        _ = harness.end(ids[0], CoreHarness.completed("1"))
        #expect(harness.core.state(of: ids[0]) == .completed)
    }

    @Test func withAStoreEachDecisionIsAnOperationInTheOrderItWasMade() {
        var harness = CoreHarness(recordsToStore: true)
        let ids = harness.add(["http://a/1", "http://a/2"])
        _ = harness.end(ids[1], .failed(HaulError(.httpStatus, "Not Found", httpStatus: 404)))
        _ = harness.end(ids[0], CoreHarness.completed("1"))
        let recorded = harness.core.storeOperations.map { operation -> String in
            switch operation {
            case .insert(let item): "insert \(item.id == ids[0] ? 1 : 2)"
            case .failed(let id, _, _): "failed \(id == ids[0] ? 1 : 2)"
            case .completed(let id, _, _): "completed \(id == ids[0] ? 1 : 2)"
            case .state(let id, let state, _): "\(state) \(id == ids[0] ? 1 : 2)"
            case .checkpoint(let id, _): "checkpoint \(id == ids[0] ? 1 : 2)"
            case .validator(let id, _, _, _): "validator \(id == ids[0] ? 1 : 2)"
            default: "\(operation)"
            }
        }
        // An attempt that ends unfinished records its start, validator and bytes, then its end; one that completes
        // records only its completion.
        #expect(
            recorded == ["insert 1", "insert 2", "running 2", "validator 2", "checkpoint 2", "failed 2", "completed 1"]
        )
        var unrecorded = CoreHarness(recordsToStore: false)
        _ = unrecorded.add(["http://a/1"])
        #expect(unrecorded.core.storeOperations.isEmpty, "without a store, nothing is recorded")
    }
}
