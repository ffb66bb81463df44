import Testing

@testable import HaulHTTP1

@Suite("Handing a result to the task that waits for it")
struct HandoffTests {
    struct Refused: Error, Equatable {}

    @Test func aResultGivenBeforeTheWaitIsReturnedAtOnce() async throws {
        let handoff = Handoff<Int>()
        handoff.succeed(7)
        #expect(try await handoff.value() == 7)
    }

    @Test func aWaitingTaskGetsTheResultGivenLater() async throws {
        let handoff = Handoff<Int>()
        let waiting = Task { try await handoff.value() }
        // Given from another thread once the task has had time to wait (either order is a valid hand-off).
        try await Task.sleep(for: .milliseconds(20))
        Task.detached { handoff.succeed(42) }
        #expect(try await waiting.value == 42)
    }

    @Test func aFailureIsThrownToTheWaitingTask() async {
        let handoff = Handoff<Void>()
        let waiting = Task { try await handoff.value() }
        handoff.fail(Refused())
        await #expect(throws: Refused.self) { try await waiting.value }
    }

    @Test func onlyTheFirstResultCounts() async throws {
        let handoff = Handoff<Int>()
        handoff.succeed(1)
        handoff.fail(Refused())
        handoff.succeed(2)
        #expect(try await handoff.value() == 1)

        let failed = Handoff<Int>()
        failed.fail(Refused())
        failed.succeed(3)
        await #expect(throws: Refused.self) { try await failed.value() }
    }

    @Test func resultsGivenFromManyThreadsAtOnceReachEachWaitingTaskOnce() async throws {
        let handoffs = (0..<200).map { _ in Handoff<Int>() }
        try await withThrowingTaskGroup(of: Int.self) { group in
            for (index, handoff) in handoffs.enumerated() {
                group.addTask { try await handoff.value() - index }
                group.addTask {
                    handoff.succeed(index)
                    handoff.succeed(-1)
                    return 0
                }
            }
            var sum = 0
            for try await difference in group { sum += abs(difference) }
            #expect(sum == 0)
        }
    }
}
