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

    @Test func firingTheSignalCancelsTheTaskGivenToIt() async {
        let signal = StopSignal()
        let started = ContinuousClock.now
        let task = Task { _ = try? await Task.sleep(for: .seconds(60)) }
        signal.cancelOnFire(task)
        signal.fire()
        await task.value
        #expect(task.isCancelled)
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    @Test func aTaskGivenToASignalThatFiredAlreadyIsCancelledAtOnce() async {
        let signal = StopSignal()
        signal.fire()
        let task = Task { _ = try? await Task.sleep(for: .seconds(60)) }
        signal.cancelOnFire(task)
        await task.value
        #expect(task.isCancelled)
    }

    @Test func aTaskIsNotCancelledWhileTheSignalHasNotFired() async {
        let signal = StopSignal()
        let task = Task { _ = try? await Task.sleep(for: .milliseconds(20)) }
        signal.cancelOnFire(task)
        await task.value
        #expect(!task.isCancelled)
    }

    @Test func aSignalLetsGoOfItsTaskOnceTheTaskHasEnded() async {
        // A task's handle keeps all the memory its stack grew; a signal may outlive its task.
        let signal = StopSignal()
        let task = Task {}
        signal.cancelOnFire(task)
        await task.value
        signal.taskEnded()
        signal.fire()
        #expect(!task.isCancelled, "firing cancels no task once the signal has let go of it")
        #expect(signal.isFired)
    }
}
