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
}
