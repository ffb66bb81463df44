import Testing

@testable import Haul

@Suite("Stopping an attempt")
struct StopSignalTests {
    @Test func aWaitEndsWhenTheSignalFires() async {
        let signal = StopSignal()
        let started = ContinuousClock.now
        Task { signal.fire() }
        await signal.wait(upTo: .seconds(60))
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    @Test func aSignalThatFiredBeforeTheWaitEndsItAtOnceAndFiringTwiceIsHarmless() async {
        let signal = StopSignal()
        signal.fire()
        signal.fire()
        let started = ContinuousClock.now
        await signal.wait(upTo: .seconds(60))
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    @Test func aWaitWithoutTheSignalEndsWhenItsTimeIsUp() async {
        let signal = StopSignal()
        let started = ContinuousClock.now
        await signal.wait(upTo: .milliseconds(20))
        #expect(ContinuousClock.now - started >= .milliseconds(20))
    }

    @Test func firingTheSignalCancelsTheOperationItRunsAndItsResultIsStillReturned() async {
        let signal = StopSignal()
        let started = ContinuousClock.now
        Task {
            try? await Task.sleep(for: .milliseconds(20))
            signal.fire()
        }
        let outcome = await signal.run { () async -> String in
            do {
                try await Task.sleep(for: .seconds(60))
                return "slept"
            } catch {
                return "cancelled"
            }
        }
        #expect(outcome == "cancelled")
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    @Test func anOperationRunAfterTheSignalFiredIsCancelledFromTheStart() async {
        let signal = StopSignal()
        signal.fire()
        let sawCancellation = await signal.run { Task.isCancelled }
        #expect(sawCancellation)
    }

    @Test func anOperationTheSignalNeverStopsRunsToItsEnd() async {
        let signal = StopSignal()
        let outcome = await signal.run { () async -> Bool in
            try? await Task.sleep(for: .milliseconds(20))
            return Task.isCancelled
        }
        #expect(outcome == false)
        // Firing after the operation ended reaches nothing.
        signal.fire()
    }

    @Test func cancellingTheCallingTaskCancelsTheOperation() async {
        let signal = StopSignal()
        let caller = Task {
            await signal.run { () async -> Bool in
                (try? await Task.sleep(for: .seconds(60))) == nil
            }
        }
        try? await Task.sleep(for: .milliseconds(20))
        caller.cancel()
        let operationWasCancelled = await caller.value
        #expect(operationWasCancelled)
    }
}
