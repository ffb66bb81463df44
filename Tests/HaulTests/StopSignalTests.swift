import NIOConcurrencyHelpers
import Testing

@testable import Haul

@Suite("Stopping an attempt")
struct StopSignalTests {
    @Test func firingCancelsTheRegisteredTaskOnce() async {
        let signal = StopSignal()
        let cancels = NIOLockedValueBox(0)
        let attempt = Task {
            while !Task.isCancelled { await Task.yield() }
            return "stopped"
        }
        signal.onFire {
            cancels.withLockedValue { $0 += 1 }
            attempt.cancel()
        }
        #expect(cancels.withLockedValue { $0 } == 0, "nothing happens before the signal fires")
        signal.fire()
        signal.fire()
        #expect(await attempt.value == "stopped")
        #expect(cancels.withLockedValue { $0 } == 1)
    }

    @Test func aSignalThatFiredBeforeTheRegistrationCancelsAtOnce() {
        let signal = StopSignal()
        signal.fire()
        let cancelled = NIOLockedValueBox(false)
        signal.onFire { cancelled.withLockedValue { $0 = true } }
        #expect(cancelled.withLockedValue { $0 })
    }

    @Test func aWaitEndsWhenTheSignalFiresOrItsTimeIsUp() async {
        let signal = StopSignal()
        let started = ContinuousClock.now
        Task { signal.fire() }
        await signal.wait(upTo: .seconds(60))
        #expect(ContinuousClock.now - started < .seconds(30))
        let other = StopSignal()
        await other.wait(upTo: .milliseconds(10))
    }
}
