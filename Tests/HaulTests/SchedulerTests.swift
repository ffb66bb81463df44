import Testing

@testable import Haul

@Suite("Scheduling transfers under limits")
struct SchedulerTests {
    @Test func startsInOrderUpToTheGlobalLimit() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 2, maximumPerHost: 6)
        #expect(scheduler.enqueue("a", host: "h1") == ["a"])
        #expect(scheduler.enqueue("b", host: "h1") == ["b"])
        #expect(scheduler.enqueue("c", host: "h2") == [])
        #expect(scheduler.runningEnded("a") == ["c"])
        #expect(scheduler.runningCount == 2)
    }

    @Test func letsAnotherHostGoFirstWhenOneHostIsAtItsLimit() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 3, maximumPerHost: 1)
        #expect(scheduler.enqueue("a1", host: "a") == ["a1"])
        #expect(scheduler.enqueue("a2", host: "a") == [])
        #expect(scheduler.enqueue("b1", host: "b") == ["b1"])
        #expect(scheduler.runningEnded("a1") == ["a2"])
    }

    @Test func aTransferThatLeftTheNetworkGivesUpItsSlotsOnceAndStillRunsUntilItEnds() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 2, maximumPerHost: 1)
        #expect(scheduler.enqueue("a1", host: "a") == ["a1"])
        #expect(scheduler.enqueue("a2", host: "a") == [])
        #expect(scheduler.enqueue("b1", host: "b") == ["b1"])
        #expect(scheduler.enqueue("b2", host: "b") == [])
        // a1's body has arrived: its host's slot and its global slot go to a2 while a1 publishes its file.
        #expect(!scheduler.hasLeftNetwork("a1"))
        #expect(scheduler.leftNetwork("a1") == ["a2"])
        #expect(scheduler.hasLeftNetwork("a1"))
        #expect(scheduler.leftNetwork("a1") == [], "leaving twice frees nothing more")
        #expect(scheduler.runningCount == 3)
        #expect(scheduler.slotsInUse == 2)
        #expect(scheduler.runningEnded("a1") == [], "its end frees no second slot")
        #expect(!scheduler.hasLeftNetwork("a1"), "an attempt's end forgets it")
        #expect(scheduler.slotsInUse == 2)
        #expect(scheduler.runningEnded("b1") == ["b2"])
        #expect(scheduler.leftNetwork("unknown") == [])
    }

    @Test func startsHigherPrioritiesFirstAndKeepsSubmissionOrderWithinAPriority() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 1, maximumPerHost: 6)
        #expect(scheduler.enqueue("running", host: "h") == ["running"])
        _ = scheduler.enqueue("low", host: "h", priority: -1)
        _ = scheduler.enqueue("normal1", host: "h")
        _ = scheduler.enqueue("urgent", host: "g", priority: 9)
        _ = scheduler.enqueue("normal2", host: "g")
        #expect(scheduler.waitingOrder == ["urgent", "normal1", "normal2", "low"])
        var started: [TransferID] = []
        var last: TransferID = "running"
        while let next = scheduler.runningEnded(last).first {
            started.append(next)
            last = next
        }
        #expect(started == ["urgent", "normal1", "normal2", "low"])
    }

    @Test func aChangedPriorityMovesAWaitingTransferAndLeavesNoStaleEntry() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 1, maximumPerHost: 6)
        _ = scheduler.enqueue("running", host: "h")
        _ = scheduler.enqueue("a", host: "h")
        _ = scheduler.enqueue("b", host: "h")
        _ = scheduler.enqueue("c", host: "h")
        scheduler.setPriority(5, of: "c")
        scheduler.setPriority(0, of: "running")  // not waiting: nothing happens
        #expect(scheduler.waitingOrder == ["c", "a", "b"])
        #expect(scheduler.runningEnded("running") == ["c"])
        scheduler.setPriority(-3, of: "a")
        #expect(scheduler.runningEnded("c") == ["b"])
        #expect(scheduler.runningEnded("b") == ["a"])
        #expect(scheduler.runningEnded("a") == [])
        #expect(scheduler.waitingCount == 0)
    }

    @Test func skipsTransfersRemovedWhileWaiting() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 1, maximumPerHost: 1)
        _ = scheduler.enqueue("a", host: "h")
        _ = scheduler.enqueue("b", host: "h")
        _ = scheduler.enqueue("c", host: "h")
        scheduler.removeWaiting("b")
        #expect(scheduler.waitingCount == 1)
        #expect(scheduler.runningEnded("a") == ["c"])
        #expect(scheduler.runningEnded("c") == [])
    }

    @Test func aTransferRemovedAndQueuedAgainRunsOnceAtItsNewPlace() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 1, maximumPerHost: 1)
        _ = scheduler.enqueue("a", host: "h")
        _ = scheduler.enqueue("b", host: "h")
        _ = scheduler.enqueue("c", host: "h")
        scheduler.removeWaiting("b")
        _ = scheduler.enqueue("b", host: "h")
        #expect(scheduler.runningEnded("a") == ["c"])
        #expect(scheduler.runningEnded("c") == ["b"])
        #expect(scheduler.runningEnded("b") == [])
    }

    @Test func aHeldHostStartsNothingUntilItsLastHoldIsReleasedWhileOtherHostsGoOn() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 1, maximumPerHost: 1)
        #expect(scheduler.enqueue("a1", host: "a") == ["a1"])
        _ = scheduler.enqueue("a2", host: "a")
        _ = scheduler.enqueue("b1", host: "b")
        scheduler.hold("a")
        scheduler.hold("a")
        #expect(scheduler.runningEnded("a1") == ["b1"])
        #expect(scheduler.runningEnded("b1") == [])
        #expect(scheduler.release("a") == [])
        #expect(scheduler.release("a") == ["a2"])
        #expect(scheduler.release("a") == [])
    }

    @Test func aHostIsForgottenWhenNothingIsQueuedRunningOrHeldThereAndItsNumberServesTheNextHost() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 2, maximumPerHost: 1)
        _ = scheduler.enqueue("a1", host: "a")
        _ = scheduler.enqueue("a2", host: "a")
        #expect(scheduler.trackedHostCount == 1)
        // a1 leaves the network (its host is then idle but for a2), a2 starts and ends, a1 publishes.
        #expect(scheduler.leftNetwork("a1") == ["a2"])
        #expect(scheduler.runningEnded("a2") == [])
        #expect(scheduler.trackedHostCount == 0)
        // The next host takes the forgotten number; the publishing transfer's end does not touch it.
        #expect(scheduler.enqueue("b1", host: "b") == ["b1"])
        _ = scheduler.enqueue("b2", host: "b")
        #expect(scheduler.runningEnded("a1") == [])
        #expect(scheduler.runningCount == 1)
        #expect(scheduler.runningEnded("b1") == ["b2"])
        scheduler.hold("c")
        #expect(scheduler.trackedHostCount == 2)
        #expect(scheduler.release("c") == [])
        #expect(scheduler.trackedHostCount == 1)
    }

    @Test func aHostWhoseWaitingTransfersWereAllRemovedIsForgotten() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 1, maximumPerHost: 1)
        _ = scheduler.enqueue("a1", host: "a")
        _ = scheduler.enqueue("b1", host: "b")
        _ = scheduler.enqueue("b2", host: "b")
        scheduler.removeWaiting("b1")
        scheduler.removeWaiting("b2")
        #expect(scheduler.runningEnded("a1") == [])
        #expect(scheduler.trackedHostCount == 0)
        #expect(scheduler.waitingCount == 0)
    }

    @Test func startsEveryTransferOnceWithinTheLimitsWhenManyHostsAndPrioritiesDrain() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 16, maximumPerHost: 6)
        var running: [TransferID] = []
        var hostOf: [TransferID: String] = [:]
        for index in 0..<3_000 {
            let id = TransferID("t\(index)")
            hostOf[id] = "h\(index % 100)"
            running += scheduler.enqueue(id, host: hostOf[id]!, priority: index % 3)
        }
        var started = Set(running)
        while !running.isEmpty {
            let next = scheduler.runningEnded(running.removeFirst())
            for id in next { #expect(started.insert(id).inserted) }
            running += next
            #expect(running.count <= 16)
            let perHost = Dictionary(grouping: running, by: { hostOf[$0]! }).values.map(\.count)
            #expect(perHost.allSatisfy { $0 <= 6 })
        }
        #expect(started.count == 3_000)
        #expect(scheduler.waitingCount == 0)
        #expect(scheduler.trackedHostCount == 0)
    }

    @Test func choosesAmongAHundredThousandWaitingWithoutScanningThem() {
        var scheduler = Scheduler.StateMachine(maximumConcurrent: 4, maximumPerHost: 4)
        for index in 0..<100_000 { _ = scheduler.enqueue(TransferID("t\(index)"), host: "h\(index % 3)") }
        #expect(scheduler.runningCount == 4)
        #expect(scheduler.runningEnded("t0") == ["t4"])
    }
}

@Suite("The lifecycle of one download")
struct DownloadStateMachineTests {
    typealias Machine = Download.StateMachine

    @Test func completesWhenTheAttemptSucceeds() {
        var machine = Machine()
        machine.started()
        #expect(machine.attemptEnded(.completed) == .finish(.completed, removePartialFile: false, dequeue: false))
        #expect(machine.state == .finished(.completed))
    }

    @Test func pausingAWaitingTransferTakesItOutOfTheQueue() {
        var machine = Machine()
        #expect(machine.pause() == .dequeueAndReportPaused)
        #expect(machine.resume() == .enqueueAndReportResumed)
        #expect(machine.state == .waiting)
    }

    @Test func pausingARunningTransferStopsTheAttemptAndSettlesWhenItEnds() {
        var machine = Machine()
        machine.started()
        #expect(machine.pause() == .stopAttempt)
        #expect(machine.pause() == .none)
        #expect(machine.attemptEnded(nil) == .reportPaused)
        #expect(machine.state == .paused)
    }

    @Test func aResultThatArrivesAfterAPauseIsKept() {
        var machine = Machine()
        machine.started()
        _ = machine.pause()
        #expect(machine.attemptEnded(.completed) == .finish(.completed, removePartialFile: false, dequeue: false))
    }

    @Test func resumingBeforeTheStoppedAttemptEndsQueuesItAgainOnce() {
        var machine = Machine()
        machine.started()
        _ = machine.pause()
        #expect(machine.resume() == .none)
        #expect(machine.attemptEnded(nil) == .enqueue)
        #expect(machine.state == .waiting)
    }

    @Test func cancellingRemovesThePartialFileInEveryUnfinishedState() {
        var waiting = Machine()
        #expect(waiting.cancel() == .finish(.cancelled, removePartialFile: true, dequeue: true))
        var paused = Machine()
        _ = paused.pause()
        #expect(paused.cancel() == .finish(.cancelled, removePartialFile: true, dequeue: false))
        var running = Machine()
        running.started()
        #expect(running.cancel() == .stopAttempt)
        #expect(running.attemptEnded(.failed) == .finish(.cancelled, removePartialFile: true, dequeue: false))
    }

    @Test func lateCommandsOnAFinishedTransferDoNothing() {
        var machine = Machine()
        machine.started()
        _ = machine.attemptEnded(.failed)
        #expect(machine.pause() == .none)
        #expect(machine.resume() == .none)
        #expect(machine.cancel() == .none)
        #expect(machine.state == .finished(.failed))
    }
}
